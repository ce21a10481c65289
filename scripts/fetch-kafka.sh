#!/usr/bin/env bash
# fetch-kafka.sh [VERSION] — resolves Apache Kafka's broker jars (org.apache.kafka:kafka_2.13, its
# runtime dependencies and a logging backend) from Maven Central into a cache directory outside
# the repository, for the Kafka peer (internal/tools/peer/kafka). Idempotent: a completion marker
# skips the download next time. Prints the lib directory as its last line of stdout.
#
#   MERIDIAN_CACHE   cache root (default $HOME/.cache/meridian); jars go to
#                    $MERIDIAN_CACHE/kafka-VERSION/lib
#
# Requires mvn (Maven) and network access to Maven Central.
set -euo pipefail

version="${1:-4.4.0}"
# The version goes into a pom and a path: allow only what Maven versions look like.
[[ "$version" =~ ^[0-9A-Za-z.+_-]+$ ]] || { echo "fetch-kafka: bad version '$version'" >&2; exit 2; }
cache="${MERIDIAN_CACHE:-$HOME/.cache/meridian}"
dir="$cache/kafka-$version"
lib="$dir/lib"
marker="$dir/.complete"

if [[ -f "$marker" ]]; then
	echo "$lib"
	exit 0
fi

command -v mvn >/dev/null || { echo "fetch-kafka: mvn (Maven) is not installed" >&2; exit 1; }

mkdir -p "$dir"
# A throwaway project whose only purpose is to name the dependencies; built in a temporary
# directory so that a failed or interrupted run leaves no half-filled lib directory behind.
#
# What the release's libs/ holds to run a combined broker+controller, and where it comes from:
# - kafka_2.13 (the "core" module) has the main class kafka.Kafka and the storage tool
#   kafka.tools.StorageTool (bin/kafka-storage.sh); since 4.0 most of the server lives in the
#   split modules kafka-server, kafka-storage, kafka-raft, kafka-metadata, kafka-server-common,
#   the coordinators, kafka-tools-api and kafka-clients, all runtime dependencies of kafka_2.13,
#   so Maven brings them.
# - Logging: Kafka logs through SLF4J 1.7 (slf4j-api 1.7.36 in kafka_2.13's pom), and its pom
#   brings log4j-api and log4j-core 2.x (through kafka-server) but not the binding between the
#   two: the release adds it to libs/ at packaging time only ("releaseOnly" in Kafka's build).
#   Without it SLF4J finds no provider and drops every log line. The binding for SLF4J 1.x is
#   org.apache.logging.log4j:log4j-slf4j-impl, taken below at the version of the log4j-core that
#   Kafka's own pom resolved, so that the three log4j jars match.
work="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>meridian.lab</groupId>
  <artifactId>kafka-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
</project>
EOF

echo "fetch-kafka: resolving org.apache.kafka:kafka_2.13:$version from Maven Central ..." >&2
# includeScope=runtime: the broker's classpath, without test or provided-only artifacts.
(cd "$work" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$work/lib") >&2 ||
	{ echo "fetch-kafka: mvn failed to resolve kafka_2.13:$version" >&2; exit 1; }
for jar in kafka_2.13-"$version".jar kafka-clients-"$version".jar kafka-server-"$version".jar kafka-raft-"$version".jar; do
	[[ -f "$work/lib/$jar" ]] || { echo "fetch-kafka: $jar missing after resolution" >&2; exit 1; }
done

core="$(cd "$work/lib" && ls log4j-core-*.jar 2>/dev/null | head -n1)"
[[ -n "$core" ]] || { echo "fetch-kafka: log4j-core missing after resolution (Kafka $version may log differently)" >&2; exit 1; }
log4j="${core#log4j-core-}"
log4j="${log4j%.jar}"
ls "$work/lib"/slf4j-api-1.*.jar >/dev/null 2>&1 ||
	echo "fetch-kafka: warning: slf4j-api is not 1.x; log4j-slf4j-impl binds SLF4J 1.x only" >&2
echo "fetch-kafka: adding the SLF4J binding log4j-slf4j-impl:$log4j ..." >&2
(cd "$work" && mvn -q -B dependency:copy -Dartifact="org.apache.logging.log4j:log4j-slf4j-impl:$log4j" -DoutputDirectory="$work/lib") >&2 ||
	{ echo "fetch-kafka: mvn failed to resolve log4j-slf4j-impl:$log4j" >&2; exit 1; }
[[ -f "$work/lib/log4j-slf4j-impl-$log4j.jar" ]] || { echo "fetch-kafka: log4j-slf4j-impl-$log4j.jar missing" >&2; exit 1; }

rm -rf "$lib"
mv "$work/lib" "$lib"
touch "$marker"
echo "fetch-kafka: $(ls "$lib" | wc -l) jars ($(du -sh "$lib" | cut -f1)) in $lib" >&2
echo "$lib"
