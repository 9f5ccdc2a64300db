#!/usr/bin/env bash
# PySpark 4.x runs on Java 17 or newer: say so clearly before Spark fails obscurely.
set -euo pipefail
java_bin=java
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java_bin="$JAVA_HOME/bin/java"; fi
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "error: no Java found. PySpark 4.3 needs Java 17 or newer:" >&2
  echo "  apt-get install -y openjdk-17-jre-headless   (or set JAVA_HOME to a JDK 17+)" >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1)
major=${version%%.*}
[ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
if ! [ "$major" -ge 17 ] 2>/dev/null; then
  echo "error: found Java ${version:-of unknown version} at $(command -v "$java_bin"); PySpark 4.3 needs 17 or newer:" >&2
  echo "  apt-get install -y openjdk-17-jre-headless   (or set JAVA_HOME to a JDK 17+)" >&2
  exit 1
fi
