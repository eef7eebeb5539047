#!/bin/sh
# Fetches uPlot (https://github.com/leeoniya/uPlot, MIT licence) from the
# npm registry with npm's own client, and copies its minified build and
# style sheet, with its licence, into static/: the dashboard embeds them,
# so nothing is fetched at run time. Run by hand (make uplot) to change
# the version; CI never runs it. Keep UPLOT_VERSION in step with the note
# in doc.go and the test that checks the banner (TestVendoredUPlot).
set -eu
UPLOT_VERSION=${UPLOT_VERSION:-1.6.32}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$UPLOT_VERSION" >/dev/null && tar xzf "uplot-$UPLOT_VERSION.tgz")
cp "$tmp/package/dist/uPlot.iife.min.js" "$here/static/uplot.min.js"
cp "$tmp/package/dist/uPlot.min.css" "$here/static/uplot.min.css"
cp "$tmp/package/LICENSE" "$here/static/uplot-LICENSE.txt"
echo "uPlot $UPLOT_VERSION copied into $here/static (uplot.min.js, uplot.min.css, uplot-LICENSE.txt)"
