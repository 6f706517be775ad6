"""Which address the driver's vote server binds and advertises."""

from __future__ import annotations

from typing import Any

from connectors.stage._errors import StageCode, StageError


def server_hosts(master: str, conf_get: Any) -> tuple[str, str]:
    """Return ``(bind host, advertised host)`` for the vote server of a SparkContext.

    Local masters (``local``, ``local[n]``, ``local-cluster[...]``): loopback. Otherwise
    ``spark.driver.bindAddress`` (falling back to ``spark.driver.host``) to bind and
    ``spark.driver.host`` to advertise, the address Spark's executors already use.
    ``conf_get(key)`` returns a setting or None (``SparkConf.get``).

    Raises:
        StageCode.VOTE_CHANNEL: a cluster master without ``spark.driver.host``.

    """
    if master.startswith("local"):
        return "127.0.0.1", "127.0.0.1"
    host = conf_get("spark.driver.host")
    if not host:
        msg = (
            "spark.driver.host is not set, so the vote server does not know the driver's "
            "address; set it or use vote_channel='barrier'"
        )
        raise StageError(msg, code=StageCode.VOTE_CHANNEL)
    return str(conf_get("spark.driver.bindAddress") or host), str(host)
