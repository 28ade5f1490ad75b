#!/bin/sh
# Each container gets host keys of its own at its first start; then runs the command
# (sshd by default: the frontend and mpirun reach learners and actors over SSH).
set -e
ssh-keygen -A >/dev/null
mkdir -p /run/sshd
exec "$@"
