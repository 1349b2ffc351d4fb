#!/usr/bin/env bash
# Installs every system package sinkgraph needs (Debian 12, as root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export DEBIAN_FRONTEND=noninteractive
apt-get update
# shellcheck disable=SC2046
apt-get install -y --no-install-recommends $(grep -v '^#' "$here/packages.txt")
