"""`mm2.properties`: MirrorMaker 2's configuration file, read into the flows the replicator runs.

The same file an MM2 user has: `clusters = A, B`, `A.bootstrap.servers`, `A->B.enabled = true`, the
flow's settings at the top level (for every flow) or behind `A->B.` (that flow's), and each
cluster's client settings (`A.security.protocol`, `A.ssl.*`, `A.sasl.*` for all its clients,
`A.consumer.*`, `A.producer.*`, `A.admin.*` for one kind; a Java `sasl.jaas.config` with a PLAIN or
SCRAM login module becomes librdkafka's `sasl.username` / `sasl.password`, Kafka's OAuthBearerLoginModule
with its unsecured login options librdkafka's unsecured `sasl.oauthbearer.config`). Reading is all or
nothing: every key is checked before any flow starts, and one that the replicator does not know is
refused by name (`MirrorConfigError`, exit status 2), as is one that MM2 has and the replicator does
not implement, saying so, rather than being silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from client_epochs.mirror.filters import (
    CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    GROUPS_DEFAULT,
    GROUPS_EXCLUDE_DEFAULT,
    TOPICS_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT,
    NameFilter,
    PatternError,
    PatternList,
    config_property_filter,
    topic_filter,
)
from client_epochs.mirror.policy import ReplicationPolicy, policy_for
from quorum.wire.properties import PropertiesError, parse_properties
from quorum.wire.sasl_client import sasl_login_of_client_properties

FLOW_DEFAULTS: dict[str, str] = {
    "topics": TOPICS_DEFAULT,
    "topics.exclude": TOPICS_EXCLUDE_DEFAULT,
    "groups": GROUPS_DEFAULT,
    "groups.exclude": GROUPS_EXCLUDE_DEFAULT,
    "config.properties.exclude": CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    "replication.factor": "2",
    "refresh.topics.enabled": "true",
    "refresh.topics.interval.seconds": "600",
    "sync.topic.configs.enabled": "true",
    "sync.topic.configs.interval.seconds": "600",
    "emit.checkpoints.enabled": "true",
    "emit.checkpoints.interval.seconds": "60",
    "sync.group.offsets.enabled": "false",
    "sync.group.offsets.interval.seconds": "60",
    "emit.heartbeats.enabled": "true",
    "emit.heartbeats.interval.seconds": "1",
    "heartbeats.replication.enabled": "true",
    "heartbeats.topic.replication.factor": "3",
    "checkpoints.topic.replication.factor": "3",
    "offset-syncs.topic.replication.factor": "3",
    "offset.lag.max": "100",
    "emit.offset-syncs.enabled": "true",
    "offset-syncs.topic.retention.ms": "604800000",
    "replication.policy.class": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
    "replication.policy.separator": ".",
}
"""The flow settings the replicator implements, with MM2's defaults (`offset-syncs.topic.retention.ms` is
the project's own: its offset-syncs topic is not compacted, see `client_epochs.mirror.offsets`)."""

ALREADY_SO: dict[str, str] = {
    "sync.topic.acls.enabled": "false",
    "offset-syncs.topic.location": "source",
    "replication.policy.internal.topic.separator.enabled": "true",
}
"""MM2 settings the replicator accepts only at the value that describes what it does."""

NOT_IMPLEMENTED: dict[str, str] = {
    "tasks.max": "the replicator scales by processes: run several with the same file, they share the partitions",
    "topic.filter.class": "only MM2's default topic filter (topics, topics.exclude)",
    "group.filter.class": "only MM2's default group filter (groups, groups.exclude)",
    "config.property.filter.class": "only MM2's default config filter (config.properties.exclude)",
    "forwarding.admin.class": "no plug-in admin clients",
    "sync.topic.acls.interval.seconds": "ACLs are not copied",
    "refresh.groups.enabled": "groups are listed at every checkpoint",
    "refresh.groups.interval.seconds": "groups are listed at every checkpoint",
    "use.defaults.from": "topic configs are copied as the source reports them",
    "admin.timeout.ms": "admin calls use the replicator's own deadlines",
    "consumer.poll.timeout.ms": "the copy loop polls in short steps of its own",
    "config.providers": "no config providers: write the values into the file",
    "dedicated.mode.enable.internal.rest": "no Connect REST server",
    "key.converter": "records are copied as bytes",
    "value.converter": "records are copied as bytes",
    "header.converter": "records are copied as bytes",
}
"""MM2 settings the replicator does not implement: refused, with what it does instead."""

CLIENT_KINDS = ("consumer", "producer", "admin")
_CLUSTER_COMMON = re.compile(r"^(security\.protocol|client\.id|(ssl|sasl)\..+)$")
_FLOW = re.compile(r"^(?P<source>[^.>\s-][^>\s]*?)->(?P<target>[^.\s]+?)\.(?P<key>.+)$")
_ALIAS = re.compile(r"^[A-Za-z0-9_-]+$")
_JAAS_CREDENTIAL = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAAS_OPTION = re.compile(r'\b([\w.$-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class MirrorConfigError(ValueError):
    """The file cannot be run: the message names the key (and the file) and what is wrong."""


@dataclass(frozen=True)
class ClusterClients:
    """One cluster of the file: its address and the librdkafka settings of each kind of client."""

    alias: str
    bootstrap: str
    common: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, dict[str, str]] = field(default_factory=dict)

    def client(self, kind: str) -> dict[str, str]:
        """Settings of a `kind` client of this cluster (its bootstrap servers not included)."""
        return {**self.common, **self.kinds.get(kind, {})}


@dataclass(frozen=True)
class Flow:
    """One enabled `A->B` flow and its settings (MM2's names, dots as underscores)."""

    source: ClusterClients
    target: ClusterClients
    topics: NameFilter
    config_properties_exclude: PatternList
    policy: ReplicationPolicy
    settings: dict[str, str]

    @property
    def name(self) -> str:
        return f"{self.source.alias}->{self.target.alias}"

    def flag(self, key: str) -> bool:
        return self.settings[key] == "true"

    def number(self, key: str) -> int:
        return int(self.settings[key])

    def should_replicate(self, topic: str) -> bool:
        """MM2's `shouldReplicateTopic`: matched by the topic filter (or a heartbeats topic, while
        `heartbeats.replication.enabled`), not internal, and not a copy of a topic of the target."""
        wanted = self.topics(topic) or (self.flag("heartbeats.replication.enabled")
                                        and self.policy.is_heartbeats_topic(topic))
        internal = self.policy.is_internal_topic(topic)
        return wanted and not internal and not self.policy.is_cycle(topic, self.target.alias)

    def target_topic(self, topic: str) -> str:
        return self.policy.format_remote_topic(self.source.alias, topic)


@dataclass(frozen=True)
class MirrorConfig:
    clusters: dict[str, ClusterClients]
    flows: list[Flow]


def read_config(path: str | Path, only_targets: set[str] | None = None) -> MirrorConfig:
    """The flows of the file at `path` (only those into `only_targets`, MM2's `--clusters`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise MirrorConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise MirrorConfigError(f"{path} is not UTF-8 text") from None
    try:
        props = parse_properties(text)
    except PropertiesError as exc:
        raise MirrorConfigError(f"{path}: {exc}") from None
    try:
        return parse_config(props, only_targets)
    except MirrorConfigError as exc:
        raise MirrorConfigError(f"{path}: {exc}") from None


def parse_config(props: Mapping[str, str], only_targets: set[str] | None = None) -> MirrorConfig:
    aliases = [a.strip() for a in props.get("clusters", "").split(",") if a.strip()]
    if not aliases:
        raise MirrorConfigError("clusters: name the clusters, e.g. clusters = A, B")
    bad = [a for a in aliases if not _ALIAS.match(a)]
    if bad:
        raise MirrorConfigError(f"clusters: {', '.join(map(repr, bad))} is not an alias (letters, digits, _ and -)")
    if only_targets is not None and not only_targets <= set(aliases):
        raise MirrorConfigError(f"--clusters names {', '.join(sorted(only_targets - set(aliases)))}, "
                                f"not in clusters = {', '.join(aliases)}")
    top, per_flow, per_cluster = _sort_keys(props, aliases)
    clusters = {alias: _cluster(alias, per_cluster.get(alias, {})) for alias in aliases}
    flows = []
    for (source, target), flow_props in sorted(per_flow.items()):
        if source not in clusters or target not in clusters or source == target:
            raise MirrorConfigError(f"{source}->{target}: a flow between two different clusters of "
                                    f"clusters = {', '.join(aliases)}")
        enabled = _bool(f"{source}->{target}.enabled", flow_props.pop("enabled", "false"))
        if enabled and (only_targets is None or target in only_targets):
            flows.append(_flow(clusters[source], clusters[target], {**top, **flow_props}))
    if not flows:
        raise MirrorConfigError("no flow is enabled" + (f" into {', '.join(sorted(only_targets))}" if only_targets
                                                        else "") + ": set A->B.enabled = true")
    return MirrorConfig(clusters, flows)


def _sort_keys(props: Mapping[str, str], aliases: list[str]
               ) -> tuple[dict[str, str], dict[tuple[str, str], dict[str, str]], dict[str, dict[str, str]]]:
    """Every key into the top-level flow settings, a flow's, or a cluster's; refusals by name."""
    top: dict[str, str] = {}
    per_flow: dict[tuple[str, str], dict[str, str]] = {}
    per_cluster: dict[str, dict[str, str]] = {}
    for key, value in props.items():
        if key == "clusters":
            continue
        flow = _FLOW.match(key)
        if flow is not None:
            rest = flow["key"]
            if rest != "enabled":
                _check_flow_key(key, rest, value)
            per_flow.setdefault((flow["source"], flow["target"]), {})[rest] = value
            continue
        alias, _, rest = key.partition(".")
        if alias in aliases and rest:
            per_cluster.setdefault(alias, {})[rest] = value
            continue
        _check_flow_key(key, key, value)
        top[key] = value
    return top, per_flow, per_cluster


def _check_flow_key(key: str, name: str, value: str) -> None:
    if name in FLOW_DEFAULTS:
        return
    if name in ALREADY_SO:
        if value.strip().lower() != ALREADY_SO[name]:
            raise MirrorConfigError(f"{key} = {value}: not implemented by client-epochs-mirror (only "
                                    f"{ALREADY_SO[name]} is what it does)")
        return
    if name in NOT_IMPLEMENTED:
        raise MirrorConfigError(f"{key}: an MM2 setting client-epochs-mirror does not implement "
                                f"({NOT_IMPLEMENTED[name]})")
    raise MirrorConfigError(f"{key}: unknown setting (not an MM2 setting client-epochs-mirror knows, nor a cluster's "
                            f"<alias>.* setting of an alias in clusters)")


def _cluster(alias: str, props: dict[str, str]) -> ClusterClients:
    bootstrap = props.pop("bootstrap.servers", "").strip()
    if not bootstrap:
        raise MirrorConfigError(f"{alias}.bootstrap.servers is required")
    common: dict[str, str] = {}
    kinds: dict[str, dict[str, str]] = {kind: {} for kind in CLIENT_KINDS}
    for key, value in props.items():
        kind, _, setting = key.partition(".")
        if kind in CLIENT_KINDS and setting:
            kinds[kind][setting] = value
        elif _CLUSTER_COMMON.match(key):
            common[key] = value
        else:
            raise MirrorConfigError(f"{alias}.{key}: unknown cluster setting (bootstrap.servers, security.protocol, "
                                    f"ssl.*, sasl.*, client.id, or consumer.*, producer.*, admin.* for one kind)")
    clients = ClusterClients(alias, bootstrap, _librdkafka(alias, common),
                             {kind: _librdkafka(f"{alias}.{kind}", settings) for kind, settings in kinds.items()})
    try:  # the replicator's own connections to a source take its consumer's settings: refused now, by name
        sasl_login_of_client_properties(clients.client("consumer"))
    except ValueError as exc:
        raise MirrorConfigError(f"{alias}.{exc}") from None
    return clients


def _librdkafka(where: str, settings: dict[str, str]) -> dict[str, str]:
    """Java client settings as librdkafka takes them: a PLAIN or SCRAM `sasl.jaas.config` becomes
    `sasl.username` / `sasl.password`; JKS stores are refused (librdkafka reads PEM files)."""
    out = dict(settings)
    jaas = out.pop("sasl.jaas.config", None)
    if "sasl.login.callback.handler.class" in out:
        raise MirrorConfigError(f"{where}.sasl.login.callback.handler.class: Java login callbacks (such as OIDC's "
                                f"OAuthBearerLoginCallbackHandler) cannot run here; OAUTHBEARER takes Kafka's "
                                f"unsecured login options in sasl.jaas.config")
    if jaas is not None and "OAuthBearerLoginModule" in jaas:
        out.update(_unsecured_oauthbearer(where, jaas))
    elif jaas is not None:
        if "PlainLoginModule" not in jaas and "ScramLoginModule" not in jaas:
            raise MirrorConfigError(f"{where}.sasl.jaas.config: only PlainLoginModule, ScramLoginModule and "
                                    f"OAuthBearerLoginModule (unsecured) logins can be used (librdkafka has no JAAS)")
        found = dict(_JAAS_CREDENTIAL.findall(jaas))
        if set(found) != {"username", "password"}:
            raise MirrorConfigError(f"{where}.sasl.jaas.config: no username=\"...\" password=\"...\" in it")
        out.setdefault("sasl.username", found["username"])
        out.setdefault("sasl.password", found["password"])
    for key in ("ssl.truststore.location", "ssl.keystore.location"):
        if key in out:
            raise MirrorConfigError(f"{where}.{key}: Java key stores are not read; give PEM files with "
                                    f"ssl.ca.location, ssl.certificate.location and ssl.key.location")
    return out


def _unsecured_oauthbearer(where: str, jaas: str) -> dict[str, str]:
    """Kafka's OAuthBearerLoginModule with its unsecured login options (OAuthBearerUnsecuredLoginCallback-
    Handler: `unsecuredLoginStringClaim_sub`, `unsecuredLoginListClaim_scope` whose first character is the
    separator, `unsecuredLoginLifetimeSeconds`, `unsecuredLoginPrincipalClaimName`,
    `unsecuredLoginScopeClaimName`, `unsecuredLoginExtension_<name>`) as librdkafka's unsecured tokens."""
    key = f"{where}.sasl.jaas.config"
    options = dict(_JAAS_OPTION.findall(jaas))
    principal_claim = options.pop("unsecuredLoginPrincipalClaimName", "sub")
    scope_claim = options.pop("unsecuredLoginScopeClaimName", "scope")
    principal = options.pop(f"unsecuredLoginStringClaim_{principal_claim}", None)
    if not principal:
        raise MirrorConfigError(f"{key}: OAuthBearerLoginModule needs unsecuredLoginStringClaim_{principal_claim}")
    config = [f"principal={principal}"]
    listed = options.pop(f"unsecuredLoginListClaim_{scope_claim}", None)
    scope = [part for part in listed[1:].split(listed[0]) if part] if listed else []
    if scope:
        config.append(f"scope={','.join(scope)}")
    if "unsecuredLoginLifetimeSeconds" in options:
        config.append(f"lifeSeconds={options.pop('unsecuredLoginLifetimeSeconds')}")
    if principal_claim != "sub":
        config.append(f"principalClaimName={principal_claim}")
    if scope_claim != "scope":
        config.append(f"scopeClaimName={scope_claim}")
    for name in [name for name in options if name.startswith("unsecuredLoginExtension_")]:
        config.append(f"extension_{name.removeprefix('unsecuredLoginExtension_')}={options.pop(name)}")
    unusable = sorted(name for name in options if name.startswith("unsecuredLogin"))
    if unusable:
        raise MirrorConfigError(f"{key}: {unusable[0]} cannot be put in librdkafka's unsecured tokens (they carry "
                                f"the principal, the scope, the lifetime and extensions)")
    if any(char.isspace() or char == '"' for item in config for char in item.partition("=")[2]):
        raise MirrorConfigError(f"{key}: a value with a space or a quote cannot go into sasl.oauthbearer.config")
    return {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": " ".join(config)}


def _flow(source: ClusterClients, target: ClusterClients, given: dict[str, str]) -> Flow:
    settings = {**FLOW_DEFAULTS, **{k: v.strip() for k, v in given.items()}}
    prefix = f"{source.alias}->{target.alias}."
    for key, value in settings.items():
        if key.endswith(".enabled"):
            settings[key] = str(_bool(prefix + key, value)).lower()
        elif key.endswith(".seconds") or key.endswith("replication.factor"):
            _positive(prefix + key, value)
    try:
        topics = topic_filter(settings["topics"], settings["topics.exclude"])
        excluded_configs = config_property_filter(settings["config.properties.exclude"])
        policy = policy_for(settings["replication.policy.class"], settings["replication.policy.separator"])
    except (PatternError, ValueError) as exc:
        raise MirrorConfigError(f"{source.alias}->{target.alias}: {exc}") from None
    return Flow(source, target, topics, excluded_configs, policy, settings)


def _bool(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise MirrorConfigError(f"{key} = {value!r}: true or false")
    return text == "true"


def _positive(key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise MirrorConfigError(f"{key} = {value!r}: a whole number") from None
    if number < 1:
        raise MirrorConfigError(f"{key} = {value}: must be 1 or more")
    return number

