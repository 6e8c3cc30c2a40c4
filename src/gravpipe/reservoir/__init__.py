"""Moving run outputs between sites, whole and verified (DESIGN.md, "Data Reservoir").

- :mod:`~gravpipe.reservoir.manifest`: ``manifest.json`` in every run folder (sizes, a
  SHA-256 per 4 MiB chunk and per file), written as each file is completed; ``verify``.
- :mod:`~gravpipe.reservoir.serve`: ``gravpipe serve``, a read-only range server (aiohttp).
- :mod:`~gravpipe.reservoir.fetch`: ``gravpipe fetch``, parallel paced range streams with
  per-chunk verification and resume, from any HTTP(S) range server.
- :mod:`~gravpipe.reservoir.remote`: a remote snapshot read through ranged reads (fsspec +
  h5py), each chunk touched verified against the manifest.
"""

from gravpipe.reservoir.manifest import MANIFEST_NAME, Manifest, ManifestError, record, verify

__all__ = ["MANIFEST_NAME", "Manifest", "ManifestError", "record", "verify"]
