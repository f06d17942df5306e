"""The JVM jars we run (Apache Kafka's broker, Spark's Kafka connector, RocketMQ), as resolved by
``make jvm`` from deploy/jvm/pom.xml into deploy/jvm/lib/<set>/, and the java to run them with.

``COMMITLOG_JVM_LIB`` names another lib directory (an installed package has no checkout beside it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ENV_LIB = "COMMITLOG_JVM_LIB"
CHECKOUT_LIB = Path(__file__).resolve().parent.parent / "deploy" / "jvm" / "lib"


class JvmJarsMissing(RuntimeError):
    """A jar set was never resolved: the message says how to get it."""


def lib_dir() -> Path:
    return Path(os.environ.get(ENV_LIB) or CHECKOUT_LIB)


def jar_set(name: str) -> list[Path]:
    """The jars of one set of deploy/jvm/pom.xml (``kafka``, ``spark-kafka``, ``rocketmq4``,
    ``rocketmq5``), sorted by name; JvmJarsMissing when ``make jvm`` has not resolved it."""
    folder = lib_dir() / name
    if not (folder / ".resolved").exists():
        raise JvmJarsMissing(f"the {name} jars are not in {folder}: run `make jvm` (downloads them from "
                             f"Maven Central once, as deploy/jvm/pom.xml lists them)")
    return sorted(folder.glob("*.jar"))


def has_jar_set(name: str) -> bool:
    return (lib_dir() / name / ".resolved").exists()


def classpath(name: str, *extra: Path | str) -> str:
    """A java -cp value: ``extra`` entries first, then every jar of the set."""
    jar_set(name)
    return os.pathsep.join([*map(str, extra), str(lib_dir() / name / "*")])


def java() -> str:
    """The java that runs the jars: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JvmJarsMissing("no java on PATH and no JAVA_HOME: the JVM brokers need a Java 17 runtime")
    return found
