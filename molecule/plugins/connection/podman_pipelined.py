# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Molecule's podman connection with pipelining: one `podman exec -i` per module.

containers.podman.podman sends nothing on stdin, so each module a task runs costs three podman
processes (`podman mount` on every connect, a mkdir of a temporary folder, the module itself), ~25 ms
of CPU each on the CI box: a third of a scenario's CPU. Here the module goes to the stdin of one
`podman exec -i`, and the container is mounted only when a file is copied in or out."""

from __future__ import annotations

DOCUMENTATION = r"""
name: podman_pipelined
short_description: A podman container, each module sent on the stdin of one podman exec
description:
  - containers.podman.podman with pipelining; put_file and fetch_file are that plugin's, and the
    container is mounted the first time one of them runs instead of on every connect.
  - For the Molecule scenarios (provisioner connection_options); the collection must be installed.
author: sglang-layouts contributors
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: The user that runs commands in the container (podman exec --user).
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments of every podman command.
    default: ''
    ini:
      - section: defaults
        key: podman_extra_args
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
  pipelining:
    description:
      - Send each module on the stdin of C(podman exec -i) (the reason for this plugin). An async task
        still goes through a file and Ansible's async wrapper.
    type: boolean
    default: true
    env:
      - name: ANSIBLE_PIPELINING
    vars:
      - name: ansible_pipelining
  podman_executable:
    description: The podman executable.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
"""

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection


class Connection(PodmanConnection):
    transport = "podman_pipelined"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._mount_tried = False

    def _connect(self):
        # no `podman mount` here: only put_file and fetch_file need the container's filesystem
        ConnectionBase._connect(self)
        self._connected = True
        return self

    def _mount(self):
        if not self._mount_tried:
            self._mount_tried = True
            PodmanConnection._connect(self)

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        if in_data is None:  # a command, or a module run from a file (async)
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec", "-i", *(["--user", self.user] if self.user else [])]
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path, out_path):
        self._mount()
        super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mount()
        super().fetch_file(in_path, out_path)
