"""The security store of a session (``session.security``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from canopy.client.session import Session


class Security:
    """The security store (``session.security``): needs VIEW_SECURITY to read
    and MODIFY_SECURITY to change. Commands are described in
    :mod:`sessions.security`; the helpers below build them."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self) -> dict[str, Any]:
        """Roles, principals (without password hashes) and the anonymous settings."""
        result: dict[str, Any] = await self._s._call("security_get")
        return result

    async def update(self, *commands: list[Any]) -> int:
        """Apply commands all or nothing; return the store's new version."""
        version: int = await self._s._call("security_update", [list(c) for c in commands])
        return version

    async def set_global_permissions(self, role: str, permissions: list[str]) -> int:
        return await self.update(["set_global_permissions", role, list(permissions)])

    async def set_default_path_permissions(self, role: str, permissions: list[str]) -> int:
        return await self.update(["set_default_path_permissions", role, list(permissions)])

    async def set_path_permissions(self, role: str, path: str, permissions: list[str]) -> int:
        return await self.update(["set_path_permissions", role, path, list(permissions)])

    async def remove_path_permissions(self, role: str, path: str) -> int:
        return await self.update(["remove_path_permissions", role, path])

    async def set_role_includes(self, role: str, roles: list[str]) -> int:
        return await self.update(["set_role_includes", role, list(roles)])

    async def add_principal(self, name: str, password: str, roles: list[str]) -> int:
        return await self.update(["add_principal", name, password, list(roles)])

    async def set_password(self, name: str, password: str) -> int:
        return await self.update(["set_password", name, password])

    async def set_principal_roles(self, name: str, roles: list[str]) -> int:
        return await self.update(["set_principal_roles", name, list(roles)])

    async def remove_principal(self, name: str) -> int:
        return await self.update(["remove_principal", name])

    async def set_anonymous(self, allowed: bool, roles: list[str]) -> int:
        return await self.update(["set_anonymous", allowed, list(roles)])
