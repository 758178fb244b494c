#!/bin/sh
# deps.sh — installs what the test of plug ui drives (Debian, as root):
# headless Chromium and a font for its screenshots. It does nothing when
# they are there.
set -eu
if command -v chromium >/dev/null && [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium fonts-dejavu-core
