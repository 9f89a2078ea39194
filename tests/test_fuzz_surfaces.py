"""The bounded CI variant of bench/bench_fuzz.py for issue 21's surfaces (tests/fuzz_surfaces.py): trace sets,
loop proposals, validate specs and ledgers, a fixed set of seeds each, in this process. Every case answers or
gives one typed error line naming the file, and no answer or error carries the credential variable's value
(nor an error the marker a file holds, outside the names a proposals or spec file itself declares)."""
from __future__ import annotations

import random

import fuzz_cases as F
import fuzz_surfaces as S
import pytest

SEEDS = {"traceset": 60, "proposals": 150, "validate_spec": 150, "ledger": 40}


@pytest.mark.parametrize("surface", sorted(SEEDS))
def test_surface_keeps_the_one_error_contract_and_discloses_nothing(surface, tmp_path, monkeypatch):
    for k, v in S.SECRET_ENV.items():
        monkeypatch.setenv(k, v)
    make, run = S.SURFACES[surface]
    outcomes = {"ok": 0, "error": 0}
    for seed in range(SEEDS[surface]):
        seen: list[str] = []

        def captured(p, seen=seen):
            try:
                res = run(p)
            except Exception as exc:
                seen.append(str(exc))
                raise
            seen.append(res.model_dump_json() if hasattr(res, "model_dump_json") else repr(res))
            return res

        p = make(random.Random(seed), tmp_path)
        outcome = F.contract(captured, p)  # raises ContractBroken with what broke
        outcomes[outcome] += 1
        text = " ".join(seen)
        assert not [v for v in S.SECRET_ENV.values() if v in text], (surface, seed)
        if outcome == "error" and S.SECRET_MARK in text:
            # a name the file declares (an unknown TOML key, a proposal's missing spec path) is shown; a value never
            assert "unknown key(s) " + S.SECRET_MARK in text or "spec file not found" in text, (surface, seed, text)
    assert outcomes["ok"] and outcomes["error"], outcomes  # the cases reach both the engines and their refusals
