"""RocketMQ's ACL file (plain_acl.yml): accounts, their keys and their permissions.

    accounts:
      - accessKey: writer
        secretKey: writer-secret-1
        admin: false
        defaultTopicPerm: DENY          # topics not listed below
        defaultGroupPerm: SUB           # groups not listed below
        topicPerms: [orders=PUB, audit=PUB|SUB]
        groupPerms: [billing=SUB]
      - accessKey: ops
        secretKey: ops-secret-1
        admin: true                     # every topic and group, and topic management

A permission is DENY, PUB, SUB or PUB|SUB (RocketMQ's Permission). An admin account may do
anything; others may not create, change or delete topics. ``globalWhiteRemoteAddresses`` and
``whiteRemoteAddress`` (requests let in by address, unsigned) are read and ignored, with a
warning: here every request of a broker with ACLs proves its account.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from broker_sim.common.faults import BrokerConfigError

log = logging.getLogger(__name__)

_IGNORED = ("globalWhiteRemoteAddresses", "whiteRemoteAddress")
_ACCOUNT_KEYS = {"accessKey", "secretKey", "admin", "defaultTopicPerm", "defaultGroupPerm", "topicPerms",
                 "groupPerms", "whiteRemoteAddress", "defaultSinkPerm", "sinkPerms"}
_KEY = re.compile(r"^[A-Za-z0-9_.@:+=-]{1,128}$")
MIN_SECRET_CHARS = 6  # RocketMQ's PlainPermissionManager refuses shorter keys


class Perm(enum.Flag):
    DENY = 0
    PUB = enum.auto()
    SUB = enum.auto()


_PERMS = {"DENY": Perm.DENY, "PUB": Perm.PUB, "SUB": Perm.SUB, "PUB|SUB": Perm.PUB | Perm.SUB,
          "SUB|PUB": Perm.PUB | Perm.SUB}


class AclConfigError(BrokerConfigError):
    """The ACL file cannot be used; the sentence says where and what to change."""


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: dict = field(default_factory=dict)  # name -> Perm
    group_perms: dict = field(default_factory=dict)
    # Sink ids (a Spark sink's exactly-once commits), as Kafka's transactional ids: PUB commits
    # under one, SUB looks its batches up. None: the default, PUB|SUB where the account may
    # publish to some topic (what it may write), DENY where it may publish nowhere.
    default_sink_perm: Perm | None = None
    sink_perms: dict = field(default_factory=dict)

    def topic_perm(self, name: str) -> Perm:
        return self.topic_perms.get(name, self.default_topic_perm)

    def group_perm(self, name: str) -> Perm:
        return self.group_perms.get(name, self.default_group_perm)

    def sink_perm(self, name: str) -> Perm:
        if name in self.sink_perms:
            return self.sink_perms[name]
        if self.default_sink_perm is not None:
            return self.default_sink_perm
        writes = self.default_topic_perm & Perm.PUB or any(p & Perm.PUB for p in self.topic_perms.values())
        return Perm.PUB | Perm.SUB if writes else Perm.DENY


@dataclass(frozen=True)
class AclConfig:
    accounts: dict  # access key -> Account

    @property
    def admin_account(self) -> Account | None:
        """An admin account: the one a broker signs its own requests to other brokers with."""
        return next((a for a in self.accounts.values() if a.admin), None)


def load(path: Path, allow_empty: bool = False) -> AclConfig:
    """The ACL file at ``path``; AclConfigError naming the file and what is wrong (an empty
    ``accounts:`` among them, unless ``allow_empty``: a file read again that revokes every
    account)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise AclConfigError(f"cannot read the ACL file {path}: {err.strerror or err}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise AclConfigError(f"the ACL file {path} is not valid YAML: {err}") from None
    try:
        return parse(document, allow_empty)
    except AclConfigError as err:
        raise AclConfigError(f"the ACL file {path}: {err}") from None


def parse(document, allow_empty: bool = False) -> AclConfig:
    if not isinstance(document, dict) or not isinstance(document.get("accounts"), list):
        raise AclConfigError("it needs a list 'accounts:' of accounts, each with accessKey and secretKey")
    if document.get("globalWhiteRemoteAddresses"):
        log.warning("ACL: globalWhiteRemoteAddresses is ignored: every request must be signed by an account")
    accounts = {}
    for index, entry in enumerate(document["accounts"]):
        account = _account(entry, index)
        if account.access_key in accounts:
            raise AclConfigError(f"accessKey {account.access_key!r} is given twice: each account needs its own")
        accounts[account.access_key] = account
    if not accounts and not allow_empty:
        raise AclConfigError("it lists no account: add at least one, or start the broker without --acl-file")
    return AclConfig(accounts)


def _account(entry, index: int) -> Account:
    where = f"account {index + 1}"
    if not isinstance(entry, dict):
        raise AclConfigError(f"{where} is not a mapping of accessKey, secretKey, ...")
    unknown = sorted(set(entry) - _ACCOUNT_KEYS)
    if unknown:
        raise AclConfigError(f"{where} has unknown keys {unknown}: use {sorted(_ACCOUNT_KEYS)}")
    access_key, secret_key = str(entry.get("accessKey") or ""), str(entry.get("secretKey") or "")
    if not _KEY.match(access_key):
        raise AclConfigError(f"{where}: accessKey {access_key[:40]!r} must be 1 to 128 letters, digits or "
                             ". _ @ : + = -")
    where = f"account {access_key!r}"
    if len(secret_key) < MIN_SECRET_CHARS:
        raise AclConfigError(f"{where}: secretKey must be at least {MIN_SECRET_CHARS} characters")
    if entry.get("whiteRemoteAddress"):
        log.warning("ACL: %s: whiteRemoteAddress is ignored: its requests must be signed", where,
                    extra={"account": access_key})
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise AclConfigError(f"{where}: admin is {admin!r}: write true or false")
    return Account(access_key, secret_key, admin,
                   _perm(entry.get("defaultTopicPerm", "DENY"), f"{where}: defaultTopicPerm"),
                   _perm(entry.get("defaultGroupPerm", "DENY"), f"{where}: defaultGroupPerm"),
                   _perms(entry.get("topicPerms"), f"{where}: topicPerms"),
                   _perms(entry.get("groupPerms"), f"{where}: groupPerms"),
                   _perm(entry["defaultSinkPerm"], f"{where}: defaultSinkPerm") if "defaultSinkPerm" in entry else None,
                   _perms(entry.get("sinkPerms"), f"{where}: sinkPerms"))


def _perm(text, where: str) -> Perm:
    perm = _PERMS.get(str(text).strip().upper().replace(" ", ""))
    if perm is None:
        raise AclConfigError(f"{where} is {str(text)[:40]!r}: write DENY, PUB, SUB or PUB|SUB")
    return perm


def _perms(entries, where: str) -> dict:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise AclConfigError(f"{where} must be a list of NAME=PERM, such as [orders=PUB, audit=PUB|SUB]")
    perms = {}
    for entry in entries:
        name, sep, perm = str(entry).partition("=")
        if not sep or not name.strip():
            raise AclConfigError(f"{where}: {str(entry)[:60]!r} is not NAME=PERM (such as orders=PUB|SUB)")
        perms[name.strip()] = _perm(perm, f"{where}: {name.strip()!r}")
    return perms
