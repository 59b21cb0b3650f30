"""Failed logins, counted by user name and address for login throttling (jetencode/login.py)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jetencode", "0003_models_moved_out")]

    operations = [
        migrations.CreateModel(
            name="LoginFailure",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("username", models.CharField(max_length=150)),
                ("address", models.GenericIPAddressField(null=True)),
                ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
            ],
            options={
                "db_table": "login_failures",
                "indexes": [
                    models.Index(fields=["username", "at"], name="login_failures_user_at"),
                    models.Index(fields=["address", "at"], name="login_failures_address_at"),
                ],
            },
        ),
    ]
