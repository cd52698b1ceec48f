"""`make chaos`: real faults against real processes, each scenario bounded in time and
printing its figures; `tests/chaos/` runs each at a small size in CI and asserts only what
must hold (no lost or doubled fire, nobody exits), never a time."""
