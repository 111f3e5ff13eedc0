"""sglang_layouts: the pure-Python core of the sglang-layouts collection.

Ansible modules import it as ``ansible.module_utils.sglang_layouts``; the
simulator, the filter plugins, tests and benchmarks import it as
``sglang_layouts`` with ``module_utils/`` on ``sys.path``. Modules inside the
package import each other relatively so both ways work.
"""
