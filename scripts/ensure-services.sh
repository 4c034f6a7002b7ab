#!/usr/bin/env bash
# Installs what the integration tests run for real, if missing:
#   - Redis from Debian's redis-server package;
#   - Chromium and its driver from Debian (the explorer's browser tests; browser builds are not
#     downloaded);
#   - Apache Kafka (pinned in scripts/kafka/pom.xml) as jars from Maven Central, run with the
#     machine's Java; cached under ${TRACEJUDGE_CACHE:-~/.cache/tracejudge}.
# Starting them is the tests' job (tests/realservices.py), on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  if ! command -v apt-get >/dev/null; then
    echo "ensure-services: please install $* (no apt-get here)" >&2; exit 1
  fi
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q --no-install-recommends "$@" >/dev/null \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
}

command -v redis-server >/dev/null || { echo "installing redis-server"; apt_install redis-server; }
command -v chromium >/dev/null && command -v chromedriver >/dev/null \
  || { echo "installing chromium and chromium-driver"; apt_install chromium chromium-driver; }
command -v java >/dev/null || { echo "installing java"; apt_install openjdk-17-jre-headless; }
command -v mvn >/dev/null || { echo "installing maven"; apt_install maven; }

version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' scripts/kafka/pom.xml)
libs="${TRACEJUDGE_CACHE:-$HOME/.cache/tracejudge}/kafka-$version/libs"
if [ ! -f "$libs/.complete" ]; then
  echo "fetching Apache Kafka $version from Maven Central into $libs"
  rm -rf "$libs"
  mvn -q -B -Dstyle.color=never --no-transfer-progress -f scripts/kafka/pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$libs"
  touch "$libs/.complete"
fi
echo "$libs"
