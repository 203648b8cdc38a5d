"""From the Server settings to what the front door enforces and where the server listens."""

from __future__ import annotations

import logging
import socket

from app.core.settings import ServerSettings
from app.server.security import Policy

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
ANY = "0.0.0.0"  # LAN mode: every interface of this machine


def bind_address(settings: ServerSettings) -> str:
    return ANY if settings.bind == "lan" else LOOPBACK


def lan_names() -> set[str]:
    """The names and addresses clients on the LAN may use in Host to reach this machine."""
    names: set[str] = set()
    try:
        hostname = socket.gethostname()
        names |= {hostname, socket.getfqdn(), f"{hostname}.local"}
        _, aliases, addresses = socket.gethostbyname_ex(hostname)
        names |= set(aliases) | set(addresses)
    except OSError as exc:
        logger.info("could not list this machine's names: %s", exc)
    try:  # the address a LAN route goes out from (no packet is sent for a UDP connect)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            names.add(s.getsockname()[0])
    except OSError:
        pass
    return {n.lower() for n in names if n}


# How a container on this machine names it (Docker Desktop, or --add-host=…:host-gateway). Accepted as a
# Host only in LAN mode, where the key is always required; no web page's origin can be this name.
CONTAINER_HOST = "host.docker.internal"


def policy_for(settings: ServerSettings, api_key: str | None = None) -> Policy:
    """The front door for these settings. In LAN mode the key is always required (the caller makes one)."""
    key = api_key if api_key is not None else settings.api_key
    if settings.key_required and not key:
        raise ValueError("LAN mode needs an API key")
    extra = lan_names() | {CONTAINER_HOST} if settings.bind == "lan" else set()
    return Policy.of(
        api_key=key if settings.key_required or api_key else "", extra_hosts=extra, cors_origins=settings.cors_origins
    )
