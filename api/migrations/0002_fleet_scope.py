"""Tokens may have the fleet scope (drain, evacuate and undrain workers only; issue 37)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("api", "0001_initial")]

    operations = [
        migrations.RemoveConstraint(model_name="apitoken", name="api_tokens_scope"),
        migrations.AlterField(
            model_name="apitoken",
            name="scope",
            field=models.TextField(
                choices=[("read", "read"), ("operate", "operate"), ("fleet", "fleet")], default="read"
            ),
        ),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.CheckConstraint(
                condition=models.Q(scope__in=["read", "operate", "fleet"]), name="api_tokens_scope"
            ),
        ),
    ]
