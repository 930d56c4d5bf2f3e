"""quorum.lazy_kafka: a node imports kafka-python's schemas without its clients, and a process that
then uses the clients (the kafka-python wrapper beside quorum's tools) still gets the whole package.
Each check runs in a fresh interpreter, as the test process itself imported kafka long ago."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_node_imports_the_schemas_without_the_clients_and_the_clients_still_import_after():
    out = run_fresh("""
        import sys
        import quorum.server.node
        print(sorted({m.split(".")[1] for m in sys.modules if m.startswith("kafka.")}))
        from kafka import KafkaConsumer
        import kafka
        print(KafkaConsumer.__module__, kafka.KafkaProducer.__name__, kafka.__version__ == kafka.version.__version__)
        print(all(name in sys.modules for name in ("kafka.admin", "kafka.consumer", "kafka.producer")))
    """).splitlines()
    assert "consumer" not in out[0] and "admin" not in out[0] and "producer" not in out[0], out[0]
    assert "protocol" in out[0], out[0]
    assert out[1:] == ["kafka.consumer.group KafkaProducer True", "True"]


def test_a_name_the_package_does_not_have_is_an_attribute_error_and_submodules_import_as_usual():
    out = run_fresh("""
        import quorum
        import kafka
        from kafka import codec
        print(codec.__name__)
        try:
            kafka.no_such_name
        except AttributeError as exc:
            print(exc)
        import kafka.errors
        print(kafka.errors.UnknownTopicOrPartitionError.errno)
    """).splitlines()
    assert out == ["kafka.codec", "module 'kafka' has no attribute 'no_such_name'", "3"]


def test_a_process_that_imported_kafka_first_keeps_it():
    out = run_fresh("""
        import kafka
        import quorum
        import sys
        print(sys.modules["kafka"] is kafka, hasattr(kafka, "KafkaConsumer"))
    """)
    assert out.split() == ["True", "True"]
