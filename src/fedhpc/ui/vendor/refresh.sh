#!/usr/bin/env bash
# Refresh the dashboard's vendored JavaScript from the versions pinned in package-lock.json:
# `npm ci` here, then copy each library's built file (and licence) into ../static/vendor/, which
# ships inside the wheel. Run after changing a version in package.json (then `npm install`).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --ignore-scripts --no-audit --no-fund
out=../static/vendor
mkdir -p "$out"
cp node_modules/vis-timeline/standalone/umd/vis-timeline-graph2d.min.js "$out/"
cp node_modules/vis-timeline/styles/vis-timeline-graph2d.min.css "$out/"
cp node_modules/vis-timeline/LICENSE.MIT.txt "$out/vis-timeline.LICENSE.txt"
cp node_modules/chart.js/dist/chart.umd.min.js "$out/"
cp node_modules/chart.js/LICENSE.md "$out/chart.js.LICENSE.md"
# Drop the source-map comment: the maps are not shipped.
sed -i '/^\/\/# sourceMappingURL=/d' "$out"/*.js
node -e 'const l=require("./package-lock.json").packages;
  for (const p of ["vis-timeline","chart.js"]) console.log(p, l["node_modules/"+p].version)' \
  > "$out/VERSIONS"
rm -rf node_modules
echo "vendored into $out:"; cat "$out/VERSIONS"
