"""A request's chain of reflections for its page: the origin, each follow-up round, and which
verdict is final for the chain.

Built from what the explorer holds: a follow-up's evaluation names its parent
(`origin.request_id`, with the parent's verdict as the worker found it), so the chain is walked
up through the parents held and down through the follow-ups held (the store's index of
`origin.request_id`). A parent the explorer no longer holds (past the look-back, or evicted) is
still shown from its follow-up's `origin`, and the chain's first request (`root_request_id`)
beside it when that differs. Walks are bounded in length and never revisit a request: a
`parent_request_id` is whatever the agent sent, a loop included.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from tracejudge.streams.explorer.store import Verdict, VerdictStore

MAX_LINKS = 50  # far past any rounds' bound; only a malformed chain is cut

Status = Literal["final", "open", "pending"]


@dataclass(frozen=True)
class Link:
    """One request of the chain, as the page shows it."""

    request_id: str
    reflection_round: int | None  # None: not known (a parent seen only through its follow-up)
    score: int | None  # None: the verdict is not known here
    success: bool | None
    incomplete: bool | None
    chain_final: bool | None  # as its evaluation says (Evaluation.chain_final)
    held: bool  # the explorer holds its verdict (else: known from its follow-up's origin)
    here: bool = False  # the request whose page this is
    gap: bool = False  # requests of the chain between this one and the next are not held

    @property
    def label(self) -> str:
        if self.reflection_round is None:
            return "earlier"
        return "origin" if self.reflection_round == 0 else f"round {self.reflection_round}"


@dataclass(frozen=True)
class Chain:
    links: list[Link]
    # final: the last link is final; open: a round was asked, no follow-up held (yet);
    # pending: the last verdict is the rules' one, the judge's decides
    status: Status
    final: Link | None  # the chain's final verdict, when there is one
    cut: bool = False  # longer than MAX_LINKS (or looping): the rest is not shown


def _of_verdict(v: Verdict, here: str) -> Link:
    return Link(
        v.request_id,
        v.reflection_round,
        v.score,
        v.success,
        v.incomplete,
        v.chain_final,
        held=True,
        here=v.request_id == here,
    )


def _of_evaluation(e: dict[str, Any]) -> Link:
    final = e.get("chain_final")
    return Link(
        str(e["request_id"]),
        int(e.get("reflection_round") or 0),
        int(e.get("overall_score") or 0),
        bool(e.get("success")),
        bool(e.get("incomplete")),
        final if isinstance(final, bool) else None,
        held=False,
        here=True,
    )


def _of_origin(origin: dict[str, Any]) -> Link:
    """The parent as its follow-up's evaluation saw it (its verdict when it was found)."""
    found = bool(origin.get("found"))
    round_ = origin.get("reflection_round")
    score = origin.get("overall_score")
    return Link(
        str(origin["request_id"]),
        round_ if isinstance(round_, int) else None,
        score if found and isinstance(score, int) else None,
        origin.get("success") if found else None,
        origin.get("incomplete") if found else None,
        False,  # it was followed up: not the chain's last
        held=False,
    )


def _origin(e: dict[str, Any]) -> dict[str, Any] | None:
    origin = e.get("origin")
    if isinstance(origin, dict) and isinstance(origin.get("request_id"), str):
        return origin
    return None


def chain_of(evaluation: dict[str, Any], store: VerdictStore) -> Chain | None:
    """The chain `evaluation`'s request belongs to, or None when it has none (no origin and
    no follow-up held). Its links: the parents up to the first request (or to the first one
    not held, and then the chain's root), this request, and its follow-ups held, depth first,
    oldest first."""
    rid = str(evaluation["request_id"])
    origin = _origin(evaluation)
    if origin is None and not store.children(rid):
        return None
    visited, cut = {rid}, False
    up: list[Link] = []  # from the parent upwards
    while origin is not None:
        parent = origin["request_id"]
        if parent in visited or len(visited) >= MAX_LINKS:
            cut = True
            break
        visited.add(parent)
        held = store.get(parent)
        if held is None:
            up.append(_of_origin(origin))
            root = origin.get("root_request_id")
            if isinstance(root, str) and root not in visited:
                visited.add(root)
                found = store.get(root)
                first = _of_verdict(found, rid) if found is not None else _unknown(root)
                up.append(replace(first, gap=True))  # the rounds between are not held
            break
        up.append(_of_verdict(held, rid))
        origin = _origin(held.evaluation)
    links = up[::-1]
    here = store.get(rid)
    links.append(_of_verdict(here, rid) if here is not None else _of_evaluation(evaluation))
    cut = _down(store, rid, visited, links) or cut
    last = links[-1]
    status: Status = (
        "final" if last.chain_final else "open" if last.chain_final is False else "pending"
    )
    return Chain(links, status, last if status == "final" else None, cut)


def _unknown(request_id: str) -> Link:
    """The chain's first request, known by its id only."""
    return Link(request_id, 0, None, None, None, False, held=False)


def _down(store: VerdictStore, start: str, visited: set[str], links: list[Link]) -> bool:
    """Append the follow-ups held of `start`, and theirs; True when the walk was cut."""
    here = links[-1].request_id
    stack = list(reversed(store.children(start)))
    while stack:
        child = stack.pop()
        if child.request_id in visited or len(links) >= MAX_LINKS:
            return True  # a loop, or past any rounds' bound
        visited.add(child.request_id)
        links.append(_of_verdict(child, here))
        stack.extend(reversed(store.children(child.request_id)))
    return False
