"""The filter sglang_host_addresses: each host's ansible_host or its name, and hosts a play has
read already taken from `known`, so their variables are not resolved again."""

from __future__ import annotations

from filter_plugins.sglang_layouts import FilterModule

addresses = FilterModule().filters()["sglang_host_addresses"]


class CountingHostvars(dict):
    """hostvars that count each host's lookup (Ansible resolves all of a host's variables there)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.reads = []

    def __getitem__(self, host):
        self.reads.append(host)
        return super().__getitem__(host)


def test_ansible_host_else_the_inventory_name():
    hostvars = CountingHostvars({"n0": {"ansible_host": "10.0.0.1"}, "n1": {}})
    assert addresses(["n0", "n1", "gone"], hostvars) == ["10.0.0.1", "n1", "gone"]


def test_known_hosts_are_not_looked_up_again():
    hostvars = CountingHostvars({"n0": {"ansible_host": "10.0.0.1"}, "n1": {"ansible_host": "10.0.0.2"}})
    known = dict(zip(["n0"], addresses(["n0"], hostvars), strict=True))
    hostvars.reads.clear()
    assert addresses(["n0", "n1"], hostvars, known) == ["10.0.0.1", "10.0.0.2"]
    assert hostvars.reads == ["n1"]
