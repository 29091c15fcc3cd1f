#!/bin/bash
# Install Debian's Slurm and munge (what tests/scripts/test_slurm.py starts a cluster with).
# Needs root and apt-get; installs nothing else and starts no service.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
