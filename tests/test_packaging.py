"""What an installed gravpipe ships besides its code: type stubs of the compiled core."""

import ast
from pathlib import Path

import gravpipe
from gravpipe import _core

PACKAGE = Path(gravpipe.__file__).parent


def test_package_is_marked_typed():
    assert (PACKAGE / "py.typed").is_file()


def test_core_stub_declares_every_public_name_of_the_built_module():
    stub = PACKAGE / "_core.pyi"
    assert stub.is_file(), f"no {stub}: built with GRAVPIPE_STUBS=OFF?"
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    declared = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    # module constants are declared as annotated names: PAGED_KICK_BLOCK: int = 65536
    declared |= {node.target.id for node in tree.body if isinstance(node, ast.AnnAssign)}
    public = {name for name in dir(_core) if not name.startswith("_")}
    assert {"CpuPipeline", "Hermite", "Leapfrog", "Tree", "max_threads"} <= public
    assert public == declared  # a stub from another build would differ
    pipeline = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CpuPipeline")
    methods = {n.name for n in pipeline.body if isinstance(n, ast.FunctionDef)}
    assert {"set_j", "forces", "stats"} <= methods
