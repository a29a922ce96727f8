# Type stubs for the one part of ansible-core that mypy reads (lab/mypy.ini "mypy_path"; docs/layout.md
# "Type annotations"): ansible-core ships no py.typed, so its modules are skipped imports (Any) and mypy cannot
# know that AnsibleModule.fail_json and exit_json never return. Everything else of ansible stays Any.
