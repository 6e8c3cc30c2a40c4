"""Defaults live in the C++ parameter structs; Python, the CLI help and the gravity table
read them from there (gravpipe._core.defaults())."""

from __future__ import annotations

import gravpipe as gp
from gravpipe import _core, gravity, integrators
from gravpipe.cli import build_parser


def test_python_defaults_are_the_cores():
    core = _core.defaults()
    assert gp.tree.DEFAULT_THETA == core["tree"]["theta"] == gravity.GRAVITY["tree"].params["theta"]
    assert gp.tree.DEFAULT_N_CRIT == core["tree"]["n_crit"] and gp.tree.DEFAULT_N_LEAF == core["tree"]["n_leaf"]
    assert integrators.INTEGRATORS["hermite"].defaults == core["hermite"]
    assert integrators.INTEGRATORS["leapfrog"].defaults == core["leapfrog"]
    sim = gp.Simulation(gp.ic.plummer(64, seed=1), gravity="tree")
    assert sim.config.theta == core["tree"]["theta"] and sim.config.params == core["leapfrog"]


def test_cli_help_shows_the_cores_defaults():
    run = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]
    text = run.format_help()
    core = _core.defaults()
    assert f"default {core['tree']['theta']:g}" in text
    for key in ("eta", "eta_s", "dt_max"):
        assert f"default {core['hermite'][key]:g}" in text
    assert f"default {core['leapfrog']['dt']:g}" in text
