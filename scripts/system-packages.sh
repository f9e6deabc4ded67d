#!/usr/bin/env bash
# Install the Debian packages a make target needs, only those missing.
#
#   scripts/system-packages.sh GROUP...
#
# Groups: ui (Chromium and its driver: the UI end-to-end test), deployment
# (Postgres and Redis: the integration suite), ssh (sshd, ssh, rsync and ip:
# test hosts in network namespaces). As root it runs apt-get; otherwise it
# says in one sentence what is missing and exits 2.
set -euo pipefail

declare -A PROGRAMS=(
    [ui]="chromium chromedriver"
    [deployment]="redis-server initdb"
    [ssh]="sshd ssh rsync ip unshare"
)
declare -A PACKAGES=(
    [ui]="chromium chromium-driver"
    [deployment]="postgresql redis-server"
    [ssh]="openssh-server openssh-client rsync iproute2 util-linux"
)

have() {
    case "$1" in
        initdb) compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null ;;
        sshd) [ -x /usr/sbin/sshd ] ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

missing=()
for group in "$@"; do
    if [ -z "${PACKAGES[$group]+x}" ]; then
        echo "error: unknown package group '$group' (ui, deployment, ssh)" >&2
        exit 2
    fi
    for program in ${PROGRAMS[$group]}; do
        if ! have "$program"; then
            missing+=(${PACKAGES[$group]})
            break
        fi
    done
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "error: missing Debian packages ${missing[*]}: run 'sudo apt-get install ${missing[*]}' or run this as root" >&2
    exit 2
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
