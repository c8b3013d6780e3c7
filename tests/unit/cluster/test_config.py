from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from canopy.cli import build_parser
from cluster import cli
from cluster.config import SETTINGS, ConfigError, ServerConfig, Setting, load, settings_table

ROOT = Path(__file__).resolve().parents[3]
FILE_ONLY = {"admin_password", "allow_anonymous", "countries", "fanout", "metrics_anonymous"}


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
        ("port = 70000", "port must be at least 0 and at most 65535, got 70000"),
        ("hub_root = '//'", "hub_root is not a topic path"),
        ("max_frame_size = 10", "max_frame_size must be at least 1024"),
        ("batch_window_ms = 1001", "batch_window_ms must be at least 0 and at most 1000"),
        ("namespace = ''", "namespace may not be empty"),
        ("admin_password = 'short'", "admin_password must have at least 8 characters"),
        ("allow_anonymous = 1", "allow_anonymous must be true or false"),
        ("countries = 'DE'", "countries must be a table"),
        ("[countries]\n'10.0.0.0/33' = 'DE'", "countries has an invalid network"),
        ("[countries]\n'10.0.0.0/8' = 1", "countries must map '10.0.0.0/8' to a country code string"),
        ("gcs_redis_address = 'redis'", "gcs_redis_address must be HOST:PORT, got 'redis'"),
        ("gcs_redis_address = '127.0.0.1:6379'\naddress = 'auto'", "gcs_redis_address configures the embedded"),
        ("gcs_reconnect_timeout = 1", "gcs_reconnect_timeout must be at least 5"),
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


def test_construction_validates() -> None:
    with pytest.raises(ConfigError, match="configuration: port must be an integer, got '80'"):
        ServerConfig(port="80")  # type: ignore[arg-type]
    assert ServerConfig(countries={"10.0.0.0/8": "DE"}, allow_anonymous=False).countries == {"10.0.0.0/8": "DE"}


def test_the_environment_gives_the_settings_that_name_a_variable(tmp_path: Path) -> None:
    assert load(environ={"CANOPY_ADMIN_PASSWORD": "long enough"}).admin_password == "long enough"
    assert load(environ={"CANOPY_ADMIN_PASSWORD": ""}).admin_password is None  # empty: not set
    with pytest.raises(ConfigError, match=r"^\$CANOPY_ADMIN_PASSWORD: admin_password must have at least 8"):
        load(environ={"CANOPY_ADMIN_PASSWORD": "short"})
    path = tmp_path / "canopy.toml"
    path.write_text("admin_password = 'from the file'\n")
    assert load(path, environ={"CANOPY_ADMIN_PASSWORD": "from the environment"}).admin_password == (
        "from the environment"
    )


def test_every_scalar_setting_has_a_canopy_variable_and_tables_have_none(tmp_path: Path) -> None:
    """The container image configures canopy serve by $CANOPY_<SETTING> (deploy/image/canopy-node)."""
    for s in SETTINGS:
        assert s.env == (None if s.kind is dict else "CANOPY_" + s.name.upper()), s.name
    config = load(environ={"CANOPY_PORT": "9100", "CANOPY_HOST": "0.0.0.0", "CANOPY_ALLOW_ANONYMOUS": "false",
                           "CANOPY_HISTORY_DIR": "/h", "CANOPY_FANOUT": "ignored: tables are file-only"})
    assert (config.port, config.host, config.allow_anonymous, config.history_dir) == (9100, "0.0.0.0", False, "/h")
    with pytest.raises(ConfigError, match=r"^\$CANOPY_PORT: port must be an integer, got 'eighty'"):
        load(environ={"CANOPY_PORT": "eighty"})
    with pytest.raises(ConfigError, match=r"^\$CANOPY_QUEUE_LIMIT: queue_limit must be at least"):
        load(environ={"CANOPY_QUEUE_LIMIT": "0"})
    path = tmp_path / "canopy.toml"
    path.write_text("port = 9000\npartitions = 3\n")
    both = load(path, {"partitions": 5}, environ={"CANOPY_PORT": "9001", "CANOPY_PARTITIONS": "4"})
    assert (both.port, both.partitions) == (9001, 5)  # the file, then the environment, then the flags


def test_gateways_on_one_port_need_nodes_with_addresses_of_their_own() -> None:
    assert load(overrides={"gateway_ports": "same"}).gateway_ports == "same"
    with pytest.raises(ConfigError, match=r"^command line: gateway_ports = 'same' .* the 3 local_nodes share"):
        load(overrides={"gateway_ports": "same", "local_nodes": 3})
    with pytest.raises(ConfigError, match=r"^\$CANOPY_GATEWAY_PORTS: gateway_ports must be 'offset' or 'same'"):
        load(environ={"CANOPY_GATEWAY_PORTS": "each"})


def test_serve_reads_its_configuration_file_from_canopy_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "canopy.toml"
    monkeypatch.setenv("CANOPY_CONFIG", str(path))
    assert build_parser(cli.add_serve).parse_args(["serve"]).config == str(path)
    assert build_parser(cli.add_serve).parse_args(["serve", "--config", "other.toml"]).config == "other.toml"


# -- one declaration: the loader, the `canopy serve` flags, the help and the README agree ------------


def _serve_parser() -> argparse.ArgumentParser:
    root = build_parser(cli.add_serve)
    commands = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    serve: argparse.ArgumentParser = commands.choices["serve"]
    return serve


def _sample(s: Setting) -> Any:
    """A valid value for ``s`` other than its default."""
    if s.kind is int:
        value = (s.default if s.default is not None else s.low or 0) + 1
        return min(value, s.high) if s.high is not None else value
    if s.kind is bool:
        return not s.default
    return SAMPLES.get(s.name, f"sample-{s.name}")


#: string settings whose values have a syntax of their own
SAMPLES = {"journal_fsync": "always", "gcs_redis_address": "127.0.0.1:6379", "gateway_ports": "same",
           "mqtt_create_type": "JSON"}
#: settings that cannot go with the others' samples (gcs_redis_address: with no address only;
#: gateway_ports = "same": not with local_nodes; node_namespaces: with local_nodes of 2 or more),
#: each group given alone
APART = [{"gcs_redis_address", "gateway_ports"}, {"node_namespaces", "local_nodes"}]


def test_every_setting_is_a_flag_or_deliberately_file_only() -> None:
    assert {s.name for s in SETTINGS if s.flag is None} == FILE_ONLY
    assert all(s.file_only for s in SETTINGS if s.flag is None)  # each says why
    options = {a.option_strings[0]: a.dest for a in _serve_parser()._actions if a.option_strings}
    assert options.pop("-h") == "help" and options.pop("--config") == "config"
    assert options == {s.flag: s.name for s in SETTINGS if s.flag is not None}
    assert {s.name for s in SETTINGS} == set(ServerConfig.__dataclass_fields__)


def _given(s: Setting) -> list[str]:
    """The command line that gives ``s`` its sample value (a boolean flag takes none)."""
    if s.kind is bool:
        return [str(s.flag) if _sample(s) else f"--no-{str(s.flag)[2:]}"]
    return [str(s.flag), str(_sample(s))]


def test_the_flags_and_the_file_give_the_same_configuration(tmp_path: Path) -> None:
    every = [s for s in SETTINGS if s.flag is not None]
    apart = set().union(*APART)
    for flagged in ([s for s in every if s.name not in apart], *([s for s in every if s.name in group] for group in APART)):
        args = _serve_parser().parse_args([part for s in flagged for part in _given(s)])
        from_flags = {s.name: getattr(args, s.name) for s in flagged}
        assert from_flags == {s.name: _sample(s) for s in flagged}

        path = tmp_path / "same.toml"
        path.write_text("".join(f"{name} = {json.dumps(value)}\n" for name, value in from_flags.items()))
        assert load(None, from_flags) == load(path) != ServerConfig()
    flagged = every

    unset = _serve_parser().parse_args([])  # flags not given leave the file's values alone
    assert load(path, {s.name: getattr(unset, s.name) for s in flagged}) == load(path)


def test_flag_values_are_checked_like_file_values(tmp_path: Path) -> None:
    path = tmp_path / "canopy.toml"
    path.write_text("partitions = 0\n")
    with pytest.raises(ConfigError) as from_file:
        load(path)
    with pytest.raises(ConfigError) as from_flag:
        load(None, {"partitions": 0})
    assert str(from_file.value).replace(str(path), "command line") == str(from_flag.value)


def test_serve_help_shows_every_setting() -> None:
    text = _serve_parser().format_help()
    for s in SETTINGS:
        assert (s.flag or s.name) in text
    assert all(s.name in settings_table() for s in SETTINGS)


def test_serve_without_the_server_installed_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "server_installed", lambda: False)
    assert cli.main(["serve", "--port", "0"]) == 2
    assert capsys.readouterr().err == "canopy serve: the server is not installed: pip install 'canopy[server]'\n"


def test_the_readme_lists_every_serve_flag_and_file_only_setting() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Running the broker: `canopy serve`", 1)[1].split("\n## ", 1)[0]
    synopsis = section.split("```", 2)[1]
    assert set(re.findall(r"--[a-z][a-z-]*", synopsis)) == {"--config"} | {s.flag for s in SETTINGS if s.flag}
    shown = dict(re.findall(r"\[(--[a-z-]+) ([^\]]+)\]", synopsis))
    for s in SETTINGS:
        if s.flag is not None and s.kind is bool:  # a switch: no value
            assert f"[{s.flag}]" in synopsis, s.flag
        elif s.flag is not None:  # each flag shows its default, or a placeholder when the default varies
            assert shown[s.flag] in (str(s.default), s.metavar or "N"), (s.flag, shown[s.flag])
    for s in SETTINGS:
        if s.flag is None:
            assert f"`{s.name}" in section or f"`[{s.name}]`" in section, s.name


def test_the_embedded_rays_settings_come_from_the_configuration() -> None:
    from cluster.serve import _health_checks, _system_config

    config = ServerConfig(health_check_period_ms=300, health_check_failures=2)
    assert _health_checks(config) == {
        "health_check_period_ms": 300, "health_check_timeout_ms": 300, "health_check_failure_threshold": 2}
    assert _system_config(config) == {"worker_niceness": 0}
    redis = ServerConfig(gcs_redis_address="127.0.0.1:6390", gcs_reconnect_timeout=20)
    assert _system_config(redis) == {"worker_niceness": 0, "gcs_rpc_server_reconnect_timeout_s": 20}
