"""The security model: principals, roles and permissions.

A :class:`SecurityStore` is an immutable value; :meth:`SecurityStore.apply`
returns a new store with a higher version. It holds

* **principals**, each with a password hash (scrypt, salted) and roles;
* **roles**, each with *global* permissions, *path* permissions assigned at
  paths, a *default* set of path permissions, and the roles it includes;
* whether **anonymous** sessions are allowed, and their roles.

A role's path permissions at a path come from the assignment nearest to the
path walking up the tree (the path itself, then its parent, ...), and that
assignment is the only one that counts; where the role has no assignment on
the way up, its default applies. A session's permissions are the union over
its roles and every role they include (transitively; cycles are harmless).

Global permissions: AUTHENTICATE, VIEW_SESSION, MODIFY_SESSION,
REGISTER_HANDLER, VIEW_SERVER, CONTROL_SERVER, VIEW_SECURITY,
MODIFY_SECURITY, READ_TOPIC_VIEWS, MODIFY_TOPIC_VIEWS, SERVER_LINK (held by the
principals other servers' fan-out links and remote server connections log in
as: it lets them pass on their sessions' requests). Path permissions:
READ_TOPIC, UPDATE_TOPIC, MODIFY_TOPIC, SELECT_TOPIC, EXPOSE_BRANCH,
EDIT_TIME_SERIES_EVENTS, EDIT_OWN_TIME_SERIES_EVENTS, SEND_TO_MESSAGE_HANDLER (send a
request on a path to whichever session handles it), SEND_TO_SESSION (send a
request on a path to a session named by id or filter), ACQUIRE_LOCK (acquire the
session lock whose name is the path).

Changes are commands (lists, as they travel on the wire)::

    ["set_global_permissions", role, [permission...]]
    ["set_default_path_permissions", role, [permission...]]
    ["set_path_permissions", role, path, [permission...]]
    ["remove_path_permissions", role, path]
    ["set_role_includes", role, [role...]]
    ["add_principal", name, password, [role...]]
    ["set_password", name, password]
    ["set_principal_roles", name, [role...]]
    ["remove_principal", name]
    ["set_anonymous", allowed, [role...]]

A batch applies entirely or not at all. Roles come into being when a command
names them.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from topics import paths
from topics.errors import PathError

__all__ = [
    "AuthenticationFailed",
    "GlobalPermission",
    "PathPermission",
    "PermissionDenied",
    "PermissionEvaluator",
    "SecurityCommandError",
    "SecurityStore",
    "default_store",
    "hash_password",
    "verify_password",
]


class GlobalPermission(enum.Enum):
    AUTHENTICATE = "AUTHENTICATE"
    VIEW_SESSION = "VIEW_SESSION"
    MODIFY_SESSION = "MODIFY_SESSION"
    REGISTER_HANDLER = "REGISTER_HANDLER"
    VIEW_SERVER = "VIEW_SERVER"
    CONTROL_SERVER = "CONTROL_SERVER"
    VIEW_SECURITY = "VIEW_SECURITY"
    MODIFY_SECURITY = "MODIFY_SECURITY"
    READ_TOPIC_VIEWS = "READ_TOPIC_VIEWS"
    MODIFY_TOPIC_VIEWS = "MODIFY_TOPIC_VIEWS"
    #: another server's fan-out link or remote server connection: pass on its sessions' requests
    SERVER_LINK = "SERVER_LINK"


class PathPermission(enum.Enum):
    READ_TOPIC = "READ_TOPIC"
    UPDATE_TOPIC = "UPDATE_TOPIC"
    MODIFY_TOPIC = "MODIFY_TOPIC"
    SELECT_TOPIC = "SELECT_TOPIC"
    EXPOSE_BRANCH = "EXPOSE_BRANCH"
    EDIT_TIME_SERIES_EVENTS = "EDIT_TIME_SERIES_EVENTS"
    EDIT_OWN_TIME_SERIES_EVENTS = "EDIT_OWN_TIME_SERIES_EVENTS"
    SEND_TO_MESSAGE_HANDLER = "SEND_TO_MESSAGE_HANDLER"
    SEND_TO_SESSION = "SEND_TO_SESSION"
    ACQUIRE_LOCK = "ACQUIRE_LOCK"


class SecurityCommandError(ValueError):
    """A security command is malformed or names something invalid."""

    code = "INVALID_SECURITY_COMMAND"


class PermissionDenied(Exception):
    """A session lacks a permission; names it and the path it was needed on."""

    code = "PERMISSION_DENIED"

    def __init__(self, permission: GlobalPermission | PathPermission, path: str | None = None) -> None:
        self.permission = permission
        self.path = path
        where = f" on {path!r}" if path is not None else ""
        super().__init__(f"permission {permission.value} is needed{where}")


class AuthenticationFailed(Exception):
    code = "AUTHENTICATION_FAILED"

    @classmethod
    def wrong_credentials(cls, principal: str) -> AuthenticationFailed:
        """The one answer to a failed named login, whatever failed (a refusal
        by the login guard too), so that the answer says nothing more."""
        return cls(f"wrong principal or password for {principal!r}")


# -- passwords -------------------------------------------------------------------

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


def hash_password(password: str, salt: bytes | None = None) -> str:
    """A salted scrypt hash, self-describing: ``scrypt$n$r$p$salt$hash``."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32)
    return _scrypt_hash(salt, digest)


def _scrypt_hash(salt: bytes, digest: bytes) -> str:
    b64 = base64.b64encode
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


#: checked instead of a hash that is missing (unknown principal) or unusable,
#: so that every named login costs one scrypt with today's parameters; its
#: digest is random, so no password matches it
_DUMMY_HASH = _scrypt_hash(secrets.token_bytes(16), secrets.token_bytes(32))


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored``, compared in constant time. A
    ``stored`` that is not an scrypt hash matches nothing, after as long a
    check as one that is."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            raise ValueError(scheme)
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(
            password.encode("utf-8"), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), dklen=len(expected)
        )
    except (ValueError, TypeError):
        if stored != _DUMMY_HASH:
            verify_password(password, _DUMMY_HASH)
        return False
    return hmac.compare_digest(actual, expected)


# -- the store ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Role:
    name: str
    global_permissions: frozenset[GlobalPermission] = frozenset()
    default_path_permissions: frozenset[PathPermission] = frozenset()
    path_permissions: tuple[tuple[str, frozenset[PathPermission]], ...] = ()
    includes: frozenset[str] = frozenset()

    @cached_property
    def _assigned(self) -> dict[str, frozenset[PathPermission]]:
        return dict(self.path_permissions)

    def at(self, path: str) -> frozenset[PathPermission]:
        """This role's own path permissions at ``path`` (nearest assignment, else default)."""
        assigned = self._assigned
        if not assigned:
            return self.default_path_permissions
        probe = path
        while probe:
            found = assigned.get(probe)
            if found is not None:
                return found
            probe = paths.parent(probe)
        return self.default_path_permissions


@dataclass(frozen=True)
class Principal:
    name: str
    password_hash: str
    roles: frozenset[str]


def _names(value: Any, what: str) -> frozenset[str]:
    if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(v, str) and v for v in value):
        raise SecurityCommandError(f"{what} must be a list of non-empty names, got {value!r}")
    return frozenset(value)


def _permissions(value: Any, kind: type[enum.Enum]) -> frozenset[Any]:
    names = _names(value, f"{kind.__name__} list")
    out = set()
    for name in names:
        try:
            out.add(kind(name.upper()))
        except ValueError:
            known = ", ".join(m.value for m in kind)
            raise SecurityCommandError(f"unknown {kind.__name__} {name!r}; known: {known}") from None
    return frozenset(out)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or value != value.strip():
        raise SecurityCommandError(f"{what} must be a non-empty name without surrounding spaces, got {value!r}")
    return value


def _path(value: Any) -> str:
    try:
        return paths.normalise(value)
    except PathError as e:
        raise SecurityCommandError(str(e)) from None


def _password(value: Any) -> str:
    if not isinstance(value, str) or len(value) < 8:
        raise SecurityCommandError("a password must be a string of at least 8 characters")
    return value


@dataclass(frozen=True)
class SecurityStore:
    roles: Mapping[str, Role] = field(default_factory=dict)
    principals: Mapping[str, Principal] = field(default_factory=dict)
    anonymous_allowed: bool = True
    anonymous_roles: frozenset[str] = frozenset()
    version: int = 0

    # -- changes ------------------------------------------------------------------

    def apply(self, commands: Iterable[Any]) -> SecurityStore:
        """A new store with every command applied (all or nothing)."""
        roles = dict(self.roles)
        principals = dict(self.principals)
        anonymous_allowed, anonymous_roles = self.anonymous_allowed, self.anonymous_roles

        def role(name: Any) -> Role:
            n = _name(name, "a role name")
            return roles.get(n) or Role(n)

        for command in commands:
            if not isinstance(command, (list, tuple)) or not command or not isinstance(command[0], str):
                raise SecurityCommandError(f"a command is a list starting with its name, got {command!r}")
            verb, *args = command
            try:
                if verb == "set_global_permissions":
                    r = role(args[0])
                    roles[r.name] = replace(r, global_permissions=_permissions(args[1], GlobalPermission))
                elif verb == "set_default_path_permissions":
                    r = role(args[0])
                    roles[r.name] = replace(r, default_path_permissions=_permissions(args[1], PathPermission))
                elif verb == "set_path_permissions":
                    r = role(args[0])
                    assigned = dict(r.path_permissions)
                    assigned[_path(args[1])] = _permissions(args[2], PathPermission)
                    roles[r.name] = replace(r, path_permissions=tuple(sorted(assigned.items())))
                elif verb == "remove_path_permissions":
                    r = role(args[0])
                    assigned = dict(r.path_permissions)
                    assigned.pop(_path(args[1]), None)
                    roles[r.name] = replace(r, path_permissions=tuple(sorted(assigned.items())))
                elif verb == "set_role_includes":
                    r = role(args[0])
                    includes = _names(args[1], "included roles")
                    roles[r.name] = replace(r, includes=includes)
                    for included in includes:
                        roles.setdefault(included, Role(included))
                elif verb == "add_principal":
                    name = _name(args[0], "a principal name")
                    if name in principals:
                        raise SecurityCommandError(f"principal {name!r} already exists")
                    given = _names(args[2], "roles")
                    principals[name] = Principal(name, hash_password(_password(args[1])), given)
                    for r_name in given:
                        roles.setdefault(r_name, Role(r_name))
                elif verb == "set_password":
                    p = self._principal(principals, args[0])
                    principals[p.name] = replace(p, password_hash=hash_password(_password(args[1])))
                elif verb == "set_principal_roles":
                    p = self._principal(principals, args[0])
                    given = _names(args[1], "roles")
                    principals[p.name] = replace(p, roles=given)
                    for r_name in given:
                        roles.setdefault(r_name, Role(r_name))
                elif verb == "remove_principal":
                    p = self._principal(principals, args[0])
                    del principals[p.name]
                elif verb == "set_anonymous":
                    if not isinstance(args[0], bool):
                        raise SecurityCommandError("set_anonymous takes true or false first")
                    anonymous_allowed = args[0]
                    anonymous_roles = _names(args[1], "anonymous roles")
                    for r_name in anonymous_roles:
                        roles.setdefault(r_name, Role(r_name))
                else:
                    raise SecurityCommandError(f"unknown security command {verb!r}")
            except IndexError:
                raise SecurityCommandError(f"{verb}: missing arguments") from None
        return SecurityStore(roles, principals, anonymous_allowed, anonymous_roles, self.version + 1)

    @staticmethod
    def _principal(principals: dict[str, Principal], name: Any) -> Principal:
        n = _name(name, "a principal name")
        if n not in principals:
            raise SecurityCommandError(f"no principal {n!r}")
        return principals[n]

    # -- authentication -------------------------------------------------------------

    def authenticate(self, principal: str | None, password: str | None) -> frozenset[str]:
        """The roles of a session that connects with these credentials.

        A named login costs one scrypt whether or not the principal exists
        and whether or not a password came (an unknown principal is checked
        against a dummy hash), so the time to answer does not tell which
        names are principals. Slowing repeated failures is the caller's
        part: :class:`sessions.logins.LoginGuard`.
        """
        if not principal:
            if not self.anonymous_allowed:
                raise AuthenticationFailed("anonymous sessions are not allowed")
            return self.anonymous_roles
        known = self.principals.get(principal)
        right = verify_password(password or "", _DUMMY_HASH if known is None else known.password_hash)
        if known is None or password is None or not right:
            raise AuthenticationFailed.wrong_credentials(principal)
        return known.roles

    def evaluator(self) -> PermissionEvaluator:
        return PermissionEvaluator(self)

    # -- (de)serialisation ------------------------------------------------------------

    def to_dict(self, with_secrets: bool = True) -> dict[str, Any]:
        """A JSON-ready description; without secrets it can be shown to clients."""
        return {
            "version": self.version,
            "anonymous": {"allowed": self.anonymous_allowed, "roles": sorted(self.anonymous_roles)},
            "roles": {
                r.name: {
                    "global": sorted(p.value for p in r.global_permissions),
                    "default": sorted(p.value for p in r.default_path_permissions),
                    "paths": {path: sorted(p.value for p in perms) for path, perms in r.path_permissions},
                    "includes": sorted(r.includes),
                }
                for r in sorted(self.roles.values(), key=lambda r: r.name)
            },
            "principals": {
                p.name: {"roles": sorted(p.roles), **({"password": p.password_hash} if with_secrets else {})}
                for p in sorted(self.principals.values(), key=lambda p: p.name)
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SecurityStore:
        try:
            roles = {
                name: Role(
                    name,
                    _permissions(spec["global"], GlobalPermission),
                    _permissions(spec["default"], PathPermission),
                    tuple(sorted((_path(p), _permissions(v, PathPermission)) for p, v in spec["paths"].items())),
                    _names(spec["includes"], "includes"),
                )
                for name, spec in data["roles"].items()
            }
            principals = {
                name: Principal(name, str(spec["password"]), _names(spec["roles"], "roles"))
                for name, spec in data["principals"].items()
            }
            anonymous = data["anonymous"]
            return cls(
                roles, principals, bool(anonymous["allowed"]), _names(anonymous["roles"], "roles"), int(data["version"])
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise SecurityCommandError(f"not a security store description: {e}") from None


class PermissionEvaluator:
    """Answers "may these roles do this here?" for one store, with caches."""

    def __init__(self, store: SecurityStore) -> None:
        self.store = store
        self._closures: dict[frozenset[str], tuple[Role, ...]] = {}
        self._globals: dict[frozenset[str], frozenset[GlobalPermission]] = {}
        self._paths: dict[tuple[frozenset[str], str], frozenset[PathPermission]] = {}

    def closure(self, roles: frozenset[str]) -> tuple[Role, ...]:
        """The roles and every role they include, transitively (each once)."""
        found = self._closures.get(roles)
        if found is None:
            seen: dict[str, Role] = {}
            todo = list(roles)
            while todo:
                name = todo.pop()
                if name in seen:
                    continue
                role = self.store.roles.get(name)
                if role is None:
                    continue
                seen[name] = role
                todo.extend(role.includes)
            found = self._closures[roles] = tuple(seen.values())
        return found

    def global_permissions(self, roles: frozenset[str]) -> frozenset[GlobalPermission]:
        found = self._globals.get(roles)
        if found is None:
            found = self._globals[roles] = frozenset().union(*(r.global_permissions for r in self.closure(roles)))
        return found

    def path_permissions(self, roles: frozenset[str], path: str) -> frozenset[PathPermission]:
        key = (roles, path)
        found = self._paths.get(key)
        if found is None:
            if len(self._paths) > 100_000:
                self._paths.clear()
            found = self._paths[key] = frozenset().union(*(r.at(path) for r in self.closure(roles)))
        return found

    def uniform_below(self, roles: frozenset[str], path: str) -> bool:
        """Whether every path below ``path`` has the path permissions ``path``
        has (no role of the closure assigns any strictly below it)."""
        below = path + "/" if path else ""
        return not any(
            assigned.startswith(below) and assigned != path
            for role in self.closure(roles)
            for assigned, _ in role.path_permissions
        )

    def has(self, roles: frozenset[str], permission: GlobalPermission | PathPermission, path: str | None = None) -> bool:
        if isinstance(permission, GlobalPermission):
            return permission in self.global_permissions(roles)
        return permission in self.path_permissions(roles, path or "")

    def check(self, roles: frozenset[str], permission: GlobalPermission | PathPermission, path: str | None = None) -> None:
        if not self.has(roles, permission, path):
            raise PermissionDenied(permission, path)


ADMINISTRATOR, CONTROL, CLIENT, ANONYMOUS = "ADMINISTRATOR", "CONTROL", "CLIENT", "ANONYMOUS"


def default_store(admin_password: str) -> SecurityStore:
    """The store a new installation starts with.

    * ``ADMINISTRATOR``: every permission, everywhere; the ``admin`` principal has it.
    * ``CONTROL``: for control clients: every path permission, and the session,
      handler, view and server-viewing global permissions, but no security ones.
    * ``CLIENT`` (named principals one creates) and ``ANONYMOUS`` (sessions
      without a principal): READ_TOPIC and SELECT_TOPIC, nothing else, and nothing
      under ``$MQTT`` (the gateways' records of MQTT sessions).
    """
    every_path = [p.value for p in PathPermission]
    return SecurityStore().apply(
        [
            ["set_global_permissions", ADMINISTRATOR, [p.value for p in GlobalPermission]],
            ["set_default_path_permissions", ADMINISTRATOR, every_path],
            [
                "set_global_permissions",
                CONTROL,
                ["AUTHENTICATE", "VIEW_SESSION", "MODIFY_SESSION", "REGISTER_HANDLER", "VIEW_SERVER",
                 "READ_TOPIC_VIEWS", "MODIFY_TOPIC_VIEWS"],
            ],
            ["set_default_path_permissions", CONTROL, every_path],
            ["set_default_path_permissions", CLIENT, ["READ_TOPIC", "SELECT_TOPIC"]],
            ["set_default_path_permissions", ANONYMOUS, ["READ_TOPIC", "SELECT_TOPIC"]],
            # the gateways' records of MQTT sessions (client identifiers, principals, filters)
            ["set_path_permissions", CLIENT, "$MQTT", []],
            ["set_path_permissions", ANONYMOUS, "$MQTT", []],
            ["set_anonymous", True, [ANONYMOUS]],
            ["add_principal", "admin", admin_password, [ADMINISTRATOR]],
        ]
    )
