#!/bin/sh
# KAFKA_NODE_CONTROL for docker-compose.cluster.yml: `kafka-node-control.sh stop|start NODE_ID`
# stops broker NODE_ID (its container: the port refuses connections once this returns) or
# starts it again and returns once its health check passes (the broker answers).
# integration_tests/support/kafka_cluster.py appends the action and the id to the command.
set -eu
compose="docker compose -f $(dirname "$0")/docker-compose.cluster.yml"
case "${1:-}" in
    stop) $compose stop "kafka-$2" ;;
    start) $compose up -d --wait "kafka-$2" ;;
    *) echo "usage: $0 stop|start NODE_ID" >&2; exit 2 ;;
esac
