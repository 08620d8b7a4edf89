"""Hugging Face model ids (`owner/name[@revision]`) resolved offline from the local hub cache.

The cache is the one `huggingface_hub` writes (`hf download owner/name`,
`transformers.AutoModel.from_pretrained`): `<cache>/models--owner--name/snapshots/<commit>/`
holds the files, `refs/<branch>` names the commit a branch points to. Nothing here reaches the
network: `snapshot_download(..., local_files_only=True)` only reads the cache. The snapshot
directory found is then an ordinary Hugging Face directory (`hf.load_hf_directory`).
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

__all__ = ["HubId", "hub_cache_dir", "parse_hub_id", "resolve_hub_id"]

# The Hub's repo ids: an owner and a name of letters, digits, "-", "_", "."; a revision is a
# branch, tag or commit ("refs/pr/1" has slashes).
_HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?")


class HubId(NamedTuple):
    """A Hugging Face model id.

    Attributes:
      repo: "owner/name", e.g. "Qwen/Qwen2.5-0.5B-Instruct".
      revision: a branch, tag or commit hash; "main" when the id gives none.
    """

    repo: str
    revision: str


def parse_hub_id(name: str) -> HubId | None:
    """`name` as a Hugging Face id ("owner/name" or "owner/name@revision"), or None.

    Example:
      >>> parse_hub_id("Qwen/Qwen2.5-0.5B-Instruct@main")
      HubId(repo='Qwen/Qwen2.5-0.5B-Instruct', revision='main')
      >>> parse_hub_id("/tmp/model") is None
      True
    """
    match = _HUB_ID.fullmatch(name)
    if match is None:
        return None
    return HubId(match["repo"], match["revision"] or "main")


def hub_cache_dir() -> str:
    """The hub cache directory, read from the environment now, as `huggingface_hub` reads it:
    HF_HUB_CACHE, else HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub (default
    ~/.cache/huggingface/hub)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return os.path.expanduser(cache)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def resolve_hub_id(name: str) -> str:
    """The cached snapshot directory of the Hugging Face id `name`, without network access.

    Args:
      name: "owner/name" or "owner/name@revision" (a branch, tag or commit hash).

    Returns:
      `<cache>/models--owner--name/snapshots/<commit>`.

    Raises:
      ValueError: `name` is not of the id form.
      FileNotFoundError: the id (or that revision of it) is not in the cache, or its snapshot
        is incomplete; one line naming the id, the cache directory and how to fill it.

    Example:
      >>> resolve_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct")  # after `hf download` once
      '/root/.cache/huggingface/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots/...'
    """
    hub_id = parse_hub_id(name)
    if hub_id is None:
        raise ValueError(f"{name!r} is not a Hugging Face id (owner/name or owner/name@revision).")
    # Imported here: huggingface_hub pulls an HTTP client (~0.2 s) that only an id needs.
    from huggingface_hub import errors as hub_errors
    from huggingface_hub import snapshot_download

    cache = hub_cache_dir()
    try:
        return snapshot_download(
            hub_id.repo, revision=hub_id.revision, cache_dir=cache, local_files_only=True
        )
    except hub_errors.LocalEntryNotFoundError as e:
        # a snapshot whose cached file listing names files that are absent (newer huggingface_hub)
        incomplete = isinstance(e, getattr(hub_errors, "IncompleteSnapshotError", ()))
        state = "is incomplete in" if incomplete else "is not in"
        raise FileNotFoundError(
            f"{name!r} is not a local path, and the Hugging Face model {hub_id.repo!r} "
            f"(revision {hub_id.revision!r}) {state} the local cache {cache} (nothing is "
            f"downloaded here): run `hf download {hub_id.repo}` (older huggingface_hub: "
            "`huggingface-cli download`) on a machine with network and copy its "
            f"models--{hub_id.repo.replace('/', '--')} folder into {cache}, or set HF_HUB_CACHE "
            "(or HF_HOME) to a cache that holds it."
        ) from e
