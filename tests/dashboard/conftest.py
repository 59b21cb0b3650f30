"""The dashboard tests use the cast of tests/kit/personas.py and its logged-in clients, from
tests/conftest.py: admin_client (alice, superuser: everything, the Django admin included),
operator_client (bob, Operators: looks and acts, not staff), viewer_client (charlie, Viewers:
looks, sees no controls, 403 when he posts anyway), nogroup_client (dave: logged in, sees nothing)."""
