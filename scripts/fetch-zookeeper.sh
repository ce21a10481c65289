#!/usr/bin/env bash
# fetch-zookeeper.sh [VERSION] — resolves Apache ZooKeeper's jars (org.apache.zookeeper:zookeeper
# and its runtime dependencies) from Maven Central into a cache directory outside the repository,
# for the network lab's ZooKeeper peer (internal/tools/peer/zookeeper). Idempotent: a completion
# marker skips the download next time. Prints the lib directory as its last line of stdout.
#
#   MERIDIAN_CACHE   cache root (default $HOME/.cache/meridian); jars go to
#                    $MERIDIAN_CACHE/zookeeper-VERSION/lib
#
# Requires mvn (Maven) and network access to Maven Central.
set -euo pipefail

version="${1:-3.9.5}"
# The version goes into a pom and a path: allow only what Maven versions look like.
[[ "$version" =~ ^[0-9A-Za-z.+_-]+$ ]] || { echo "fetch-zookeeper: bad version '$version'" >&2; exit 2; }
cache="${MERIDIAN_CACHE:-$HOME/.cache/meridian}"
dir="$cache/zookeeper-$version"
lib="$dir/lib"
marker="$dir/.complete"

if [[ -f "$marker" ]]; then
	echo "$lib"
	exit 0
fi

command -v mvn >/dev/null || { echo "fetch-zookeeper: mvn (Maven) is not installed" >&2; exit 1; }

mkdir -p "$dir"
# A throwaway project whose only purpose is to name the dependencies; built in a temporary
# directory so that a failed or interrupted run leaves no half-filled lib directory behind.
#
# The zookeeper artifact alone does not start a server the way the release's bin/zkServer.sh
# does: its pom marks the logging backend (logback-classic) optional, and the AdminServer's Jetty
# and Jackson, the Dropwizard metrics its latency summaries use and snappy-java as provided.
# Without logback, SLF4J drops every log line; without Jetty, the server silently replaces the
# AdminServer (which the lab's readiness and leader checks query) with a dummy; without
# snappy-java, the server dies at start (its snapshot stream class links against it). They are named
# here, with their versions left to ZooKeeper's own parent pom (imported below), so the jars are
# the ones the release tarball ships in lib/.
work="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>meridian.lab</groupId>
  <artifactId>zookeeper-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>org.apache.zookeeper</groupId>
        <artifactId>parent</artifactId>
        <version>$version</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>org.apache.zookeeper</groupId>
      <artifactId>zookeeper</artifactId>
      <version>$version</version>
    </dependency>
    <dependency>
      <groupId>ch.qos.logback</groupId>
      <artifactId>logback-classic</artifactId>
    </dependency>
    <dependency>
      <groupId>org.eclipse.jetty</groupId>
      <artifactId>jetty-server</artifactId>
    </dependency>
    <dependency>
      <groupId>org.eclipse.jetty</groupId>
      <artifactId>jetty-servlet</artifactId>
    </dependency>
    <dependency>
      <groupId>com.fasterxml.jackson.core</groupId>
      <artifactId>jackson-databind</artifactId>
    </dependency>
    <dependency>
      <groupId>io.dropwizard.metrics</groupId>
      <artifactId>metrics-core</artifactId>
    </dependency>
    <dependency>
      <groupId>org.xerial.snappy</groupId>
      <artifactId>snappy-java</artifactId>
    </dependency>
  </dependencies>
</project>
EOF

echo "fetch-zookeeper: resolving org.apache.zookeeper:zookeeper:$version from Maven Central ..." >&2
# includeScope=runtime: the server's classpath, without test or provided-only artifacts.
(cd "$work" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$work/lib") >&2 ||
	{ echo "fetch-zookeeper: mvn failed to resolve zookeeper:$version" >&2; exit 1; }
for jar in zookeeper-"$version".jar zookeeper-jute-"$version".jar; do
	[[ -f "$work/lib/$jar" ]] || { echo "fetch-zookeeper: $jar missing after resolution" >&2; exit 1; }
done
ls "$work/lib"/logback-classic-*.jar "$work/lib"/jetty-server-*.jar >/dev/null 2>&1 ||
	{ echo "fetch-zookeeper: logback-classic or jetty-server missing after resolution" >&2; exit 1; }

rm -rf "$lib"
mv "$work/lib" "$lib"
touch "$marker"
echo "fetch-zookeeper: $(ls "$lib" | wc -l) jars in $lib" >&2
echo "$lib"
