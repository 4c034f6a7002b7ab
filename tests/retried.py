"""What the suite tried more than once, reported at the end of every run (tests/conftest.py).

The suite never runs a failed test again. It starts a service again on new ports when the first
one exits before listening (a port chosen free was taken meanwhile), and a cluster again when it
does not form; each such retry is noted here, with why, so a run that needed one says so. A
retry that keeps showing up is a bug to fix, not noise to absorb.
"""

from __future__ import annotations

import os

RETRIES: list[str] = []


def note_retry(what: str, why: BaseException | str) -> None:
    reason = str(why).strip().splitlines()[0][:200] if str(why).strip() else type(why).__name__
    RETRIES.append(f"{what}: {reason}")


# Set by scripts/test.sh --fast: the fast tier starts no broker, no Redis and no Java; a test
# that tries is an integration test left outside tests/integration/.
FAST_TIER = "TEST_TIER"


def refuse_services_in_the_fast_tier(what: str) -> None:
    if os.environ.get(FAST_TIER) == "fast":
        raise RuntimeError(
            f"the fast tier starts no {what}: this test belongs under tests/integration/"
        )
