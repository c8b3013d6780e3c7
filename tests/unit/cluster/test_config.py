from __future__ import annotations

from pathlib import Path

import pytest

from cluster.config import ConfigError, ServerConfig, load
from cluster.partitioning import default_partition_count, partition_of, partitions_for
from topics.selectors import parse_selector


def test_defaults() -> None:
    config = load()
    assert config.address is None and config.port == 8080 and config.host == "127.0.0.1"
    assert 1 <= config.partitions <= 8


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "canopy.toml"
    path.write_text('port = 9000\nhost = "0.0.0.0"\npartitions = 3\nhub_root = "apps/hub"\n')
    config = load(path, {"port": 9001, "host": None})
    assert (config.port, config.host, config.partitions, config.hub_root) == (9001, "0.0.0.0", 3, "apps/hub")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("colour = 1", "unknown setting 'colour'"),
        ("port = 'x'", "port must be an integer"),
        ("port = true", "port must be an integer"),
        ("partitions = 0", "partitions must be at least 1"),
        ("port = 70000", "port must be 0..65535"),
        ("hub_root = '//'", "hub_root"),
        ("max_frame_size = 10", "max_frame_size"),
        ("port = [", "not valid TOML"),
    ],
)
def test_bad_files_name_the_setting_and_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=fragment) as info:
        load(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such configuration file"):
        load(tmp_path / "nope.toml")


def test_bad_override() -> None:
    with pytest.raises(ConfigError, match="command line: queue_limit must be at least 1"):
        ServerConfig().with_overrides({"queue_limit": 0})


def test_partitioning_is_stable_and_spread() -> None:
    assert partition_of("a/b", 4) == partition_of("a/b", 4)
    counts = [0] * 4
    for i in range(4000):
        counts[partition_of(f"topic/{i}", 4)] += 1
    assert min(counts) > 800
    assert partitions_for(parse_selector(">a/b"), 4) == [partition_of("a/b", 4)]
    assert partitions_for(parse_selector("?a/b"), 4) == [partition_of("a/b", 4)]
    assert partitions_for(parse_selector("?a/.*"), 4) == [0, 1, 2, 3]
    assert default_partition_count(2) == 1 and default_partition_count(8) == 4 and default_partition_count(64) == 8 and default_partition_count(None) == 1
