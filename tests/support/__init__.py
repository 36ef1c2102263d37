"""What the tests share as a library (tests/conftest.py keeps the fixtures and hooks that call it).

- ``paths``: the repository root and the example project's folder.
- ``workflows``: Graphbook workflow files built in a test (nodes, edges, node files) and the
  small workflows several modules run.
- ``nodes``: node files under tests/nodes/, copied where a test runs them.
- ``shared_inputs``: an expensive input made once per test run, whatever the workers.
- ``nightly``: the nightly shapes demo's data generator, days and YAML component.
- ``defs_folder``: a defs folder loaded the way Dagster loads one.
- ``webserver``: a real dagster-webserver on loopback and the GraphQL calls the UI makes.
- ``network``: free ports and a TCP listener that records connections.
- ``s3``: a moto S3 server and buckets on it.
- ``mounts``: read-only folders and private mount namespaces.
- ``leaks``: worker processes, file descriptors and /dev/shm left after a run.
"""
