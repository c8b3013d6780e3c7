"""Session trees' branch mapping tables (``session.session_trees``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from canopy.client.session import Session


class SessionTrees:
    """The branch mapping tables of session trees (``session.session_trees``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def put_table(self, session_tree_branch: str, mappings: list[tuple[str, str]]) -> int:
        """Replace the table of a branch with ``[(session filter, topic tree branch), ...]``;
        an empty list removes it. Returns the tables' new version. Needs MODIFY_TOPIC on
        the branch and EXPOSE_BRANCH on every topic tree branch."""
        version: int = await self._s._call(
            "tree_put", session_tree_branch, [[f, b] for f, b in mappings]
        )
        return version

    async def get_table(self, session_tree_branch: str) -> list[tuple[str, str]] | None:
        """The table of a branch, or ``None``; needs MODIFY_TOPIC on the branch."""
        table = await self._s._call("tree_get", session_tree_branch)
        return [(f, b) for f, b in table[1]] if table is not None else None

    async def list_tables(self) -> dict[str, list[tuple[str, str]]]:
        """The tables of the branches the session has MODIFY_TOPIC on, by branch."""
        return {branch: [(f, b) for f, b in mappings] for branch, mappings in await self._s._call("tree_list")}

    async def remove_table(self, session_tree_branch: str) -> int:
        version: int = await self._s._call("tree_remove", session_tree_branch)
        return version
