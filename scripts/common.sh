# Shared by scripts/test.sh and scripts/demo.sh; meant to be sourced, not run.

# Prints a step banner.
banner() {
    printf '\n==> %s\n' "$*"
}

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "error: need root (or sudo) to run: $*" >&2
        return 1
    fi
}

# Sets MARIADBD to the server binary's path, or to "" when it is missing.
# /usr/sbin is often not on a normal user's PATH, so it is checked first.
find_mariadbd() {
    if [ -x /usr/sbin/mariadbd ]; then
        MARIADBD=/usr/sbin/mariadbd
    else
        MARIADBD="$(command -v mariadbd 2>/dev/null || true)"
    fi
}

# Makes sure mariadbd, mariadb-install-db, mariadb and mariadb-admin exist,
# installing them with apt-get when they do not. Only the server binaries are
# installed (mariadb-server-core), not the mariadb-server package, so no system
# MariaDB service is created or started: tests and the demo run their own
# mariadbd on a private data directory, socket and port. Older releases that
# lack an unversioned mariadb-server-core fall back to mariadb-server.
ensure_mariadb() {
    find_mariadbd
    if [ -n "$MARIADBD" ] \
        && command -v mariadb-install-db >/dev/null 2>&1 \
        && command -v mariadb >/dev/null 2>&1 \
        && command -v mariadb-admin >/dev/null 2>&1; then
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: MariaDB server binaries (mariadbd, mariadb-install-db, mariadb, mariadb-admin) are missing" >&2
        echo "       and apt-get is not available; install MariaDB 10.6+ with your package manager." >&2
        return 1
    fi
    banner "installing MariaDB server binaries and client (apt-get)"
    as_root apt-get update
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        mariadb-server-core mariadb-client; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y mariadb-server mariadb-client
    fi
    find_mariadbd
    if [ -z "$MARIADBD" ]; then
        echo "error: mariadbd still not found after installing MariaDB" >&2
        return 1
    fi
}
