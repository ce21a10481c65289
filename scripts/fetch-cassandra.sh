#!/usr/bin/env bash
# fetch-cassandra.sh [VERSION] — resolves Apache Cassandra's jars (org.apache.cassandra:cassandra-all
# and its runtime dependencies) from Maven Central into a cache directory outside the repository,
# for the network lab's Cassandra peer (internal/tools/peer/cassandra). Idempotent: a completion marker
# skips the download next time. Prints the lib directory as its last line of stdout.
#
#   MERIDIAN_CACHE   cache root (default $HOME/.cache/meridian); jars go to
#                    $MERIDIAN_CACHE/cassandra-VERSION/lib
#
# Requires mvn (Maven) and network access to Maven Central.
set -euo pipefail

version="${1:-5.0.4}"
# The version goes into a pom and a path: allow only what Maven versions look like.
[[ "$version" =~ ^[0-9A-Za-z.+_-]+$ ]] || { echo "fetch-cassandra: bad version '$version'" >&2; exit 2; }
cache="${MERIDIAN_CACHE:-$HOME/.cache/meridian}"
dir="$cache/cassandra-$version"
lib="$dir/lib"
marker="$dir/.complete"

if [[ -f "$marker" ]]; then
	echo "$lib"
	exit 0
fi

command -v mvn >/dev/null || { echo "fetch-cassandra: mvn (Maven) is not installed" >&2; exit 1; }

mkdir -p "$dir"
# A throwaway project whose only purpose is to name the dependency; built in a temporary
# directory so that a failed or interrupted run leaves no half-filled lib directory behind.
work="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>meridian.lab</groupId>
  <artifactId>cassandra-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
</project>
EOF

echo "fetch-cassandra: resolving org.apache.cassandra:cassandra-all:$version from Maven Central ..." >&2
# includeScope=runtime: the daemon's classpath, without test or provided-only artifacts.
(cd "$work" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$work/lib") >&2 ||
	{ echo "fetch-cassandra: mvn failed to resolve cassandra-all:$version" >&2; exit 1; }
ls "$work/lib"/cassandra-all-"$version".jar >/dev/null 2>&1 ||
	{ echo "fetch-cassandra: cassandra-all-$version.jar missing after resolution" >&2; exit 1; }

rm -rf "$lib"
mv "$work/lib" "$lib"
touch "$marker"
echo "fetch-cassandra: $(ls "$lib" | wc -l) jars in $lib" >&2
echo "$lib"
