#!/usr/bin/env bash
# Copy one jar set of deploy/jvm/pom.xml (a profile) with its dependencies from Maven Central into
# deploy/jvm/lib/<set>/, then mark it resolved. Run by `make jvm`; after that, nothing is downloaded
# again until pom.xml changes. A set half copied (a broken download) is never marked resolved.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for set in "$@"; do
  out="$here/lib/$set"
  rm -rf "$out.partial"
  mvn -q -B -Dstyle.color=never -f "$here/pom.xml" -P "$set" dependency:copy-dependencies \
      -DoutputDirectory="$out.partial" -DincludeScope=runtime
  rm -rf "$out"
  mv "$out.partial" "$out"
  touch "$out/.resolved"
  echo "deploy/jvm/lib/$set: $(ls "$out" | wc -l) jars, $(du -sh "$out" | cut -f1)"
done
