"""The cast: the same four people in every test, each in the role that says what they may do.

- alice is a superuser (role "admin"): she may see and change everything, on the API, the
  dashboard and the Django admin.
- bob is in Operators (role "operator"): he may see everything and act on the queue, jobs, workers
  and library (submit, cancel, pause, retry, drain...), with the session or an operate-scope token;
  he is not staff, so the Django admin refuses him.
- charlie is in Viewers (role "viewer"): he may look at every page and read every API endpoint; he
  sees no controls, and every change he tries is refused (403), whatever his token's scope.
- dave has an account and no group (role "nogroup"): he may log in, and sees nothing (403).
- Someone without an account (role "anonymous") gets 401 from the API and the login page from the
  dashboard; only /healthz, /metrics and the API schema answer them.

Everyone has the same password; the test settings hash it with MD5, so creating a persona is cheap.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, User

PASSWORD = "correct horse battery staple"

# name: (role, group); alice's role comes from being a superuser.
CAST = {
    "alice": ("admin", None),
    "bob": ("operator", "Operators"),
    "charlie": ("viewer", "Viewers"),
    "dave": ("nogroup", None),
}
ROLES = ("anonymous", "nogroup", "viewer", "operator", "admin")  # least allowed first
PERSONA_OF_ROLE = {role: name for name, (role, _group) in CAST.items()}


def persona(name: str) -> User:
    """The cast member `name`, created on first use (the same user when asked again)."""
    existing = User.objects.filter(username=name).first()
    if existing is not None:
        return existing
    role, group = CAST[name]
    if role == "admin":
        return User.objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    user = User.objects.create_user(name, f"{name}@example.com", PASSWORD)
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


def in_role(role: str) -> User | None:
    """The cast member who plays `role` (None for anonymous)."""
    return None if role == "anonymous" else persona(PERSONA_OF_ROLE[role])
