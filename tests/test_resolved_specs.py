"""Every resolved spec of every run profile, pinned: a move of params between files (tasks
shared by papers, a profile that extends another, typed key declarations) must leave each
run's resolved spec, and so its identity and its kept results, as it was. A change that means
to alter specs rewrites the snapshot (``python tests/test_resolved_specs.py --write``) and
says so in CHANGELOG.md ("retrains")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pdelab.records.run import spec_sha256
from pdelab.spec.config import load_params, resolve
from pdelab.spec.run_sheet import trained_runs

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = Path(__file__).parent / "golden" / "resolved_specs.json"
PROFILES = ("smoke", "paper", "paper_mini")  # the profiles the snapshot was taken of


def resolved(params_file: Path = ROOT / "params.yaml") -> dict[str, dict[str, str]]:
    """profile -> "task/variant/seed" -> the first 16 hex digits of its spec's sha256."""
    params = load_params(params_file)
    return {
        profile: {
            f"{r.task}/{r.variant}/{r.seed}": spec_sha256(
                resolve(params, r.task, r.variant, r.seed, profile).to_dict()
            )[:16]
            for r in trained_runs(params, profile)
        }
        for profile in PROFILES
    }


def test_every_resolved_spec_is_the_snapshot_s() -> None:
    now, then = resolved(), json.loads(SNAPSHOT.read_text())
    for profile in PROFILES:
        changed = sorted(k for k in then[profile] if now[profile].get(k) != then[profile][k])
        added = sorted(set(now[profile]) - set(then[profile]))
        assert not changed and not added, (profile, changed[:20], added[:20])


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    SNAPSHOT.write_text(json.dumps(resolved(), indent=0, sort_keys=True) + "\n")
