#!/usr/bin/env bash
# The device tool sends the working tree (tracked files included) and refuses one over 64 MiB;
# the tracked reports/ (the published runs, about 90 MB) alone are over it. No device command
# reads reports/, so `away` parks it beside the checkout for the length of a device call and
# `back` returns it. Run here, not on the device:
#   bash bench/device_tree.sh away   # then the device call(s)
#   bash bench/device_tree.sh back
# git shows reports/ as deleted while it is away: commit nothing in between.
set -eu
cd "$(git rev-parse --show-toplevel)"
park="../.reports-away-$(basename "$PWD")"
case "${1:-}" in
  away)
    [ -e "$park" ] && { echo "device_tree: $park exists already (run back first)" >&2; exit 1; }
    mv reports "$park" && echo "reports/ parked at $park"
    ;;
  back)
    [ -e reports ] && { echo "device_tree: reports/ is here already" >&2; exit 1; }
    mv "$park" reports && echo "reports/ back"
    ;;
  *) echo "usage: bash bench/device_tree.sh away|back" >&2; exit 2 ;;
esac
