# Copyright: sglang-layouts contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible.builtin.jsonfile, with each host's facts decoded once per run instead of once per task."""

from __future__ import annotations

DOCUMENTATION = """
    name: sglang_facts
    short_description: JSON files per host, as jsonfile, read once per run
    description:
      - The facts of each host in a JSON file per host, written and read by C(ansible.builtin.jsonfile) itself (its
        folder, prefix and timeout settings, C(fact_caching_connection) and friends; the same files), so a later run
        or another tool reads them as before.
      - Ansible asks the fact cache for a host's facts for every task, and a file cache decodes the host's whole
        JSON document each time (with tags, through a decoder hook per mapping). A sweep's facts hold its last
        health and benchmark facts (some 60 kB), which made the decode about a tenth of a sweep's controller time.
        This plugin keeps what it read or wrote in memory for the rest of the run and decodes a host's file once.
      - Writes go to the file at once, as with jsonfile.
    author: sglang-layouts contributors
    version_added: "1.0.0"
"""

from ansible.plugins.cache import BaseCacheModule
from ansible.plugins.loader import cache_loader


class CacheModule(BaseCacheModule):
    # the file store below serializes; this layer holds the decoded values of this run
    _persistent = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._files = cache_loader.get("ansible.builtin.jsonfile")
        self._decoded: dict = {}

    def get(self, key):
        if key not in self._decoded:
            self._decoded[key] = self._files.get(key)
        return self._decoded[key]

    def set(self, key, value):
        self._files.set(key, value)
        self._decoded[key] = value

    def keys(self):
        return self._files.keys()

    def contains(self, key):
        return key in self._decoded or self._files.contains(key)

    def delete(self, key):
        self._decoded.pop(key, None)
        self._files.delete(key)

    def flush(self):
        self._decoded.clear()
        self._files.flush()
