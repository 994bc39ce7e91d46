"""The installed streamjoin version, as written into report.json, tune.json and manifests."""

from __future__ import annotations

from importlib import metadata


def tool_version() -> str:
    try:
        return metadata.version("streamjoin")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"
