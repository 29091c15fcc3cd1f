#!/bin/bash
# Install Debian's Slurm and munge (what tests/scripts/test_slurm.py starts a cluster with; .ci/run
# runs this before the tests). Needs root and apt-get; installs nothing else and starts no
# service: while it runs, the policy-rc.d below forbids the packages' scripts to start their
# daemons (exit 101, Debian's invoke-rc.d protocol), so munged, slurmctld and slurmd stay down.
# A policy-rc.d that was there before is put back afterwards.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
saved=""
if [ -e "$policy" ]; then
    saved=$(mktemp)
    cp -p "$policy" "$saved"
fi
restore() {
    if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi
}
trap restore EXIT
printf '#!/bin/sh\nexit 101\n' >"$policy"
chmod 755 "$policy"
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
