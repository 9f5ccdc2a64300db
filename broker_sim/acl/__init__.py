"""Accounts and permissions (RocketMQ's ACL): config.py reads the ACL file, guard.py checks
requests against it. The doors say what each request needs (their acl.py modules). Imported by
the doors and the assembly; imports the core's errors and the store's echo."""

from broker_sim.acl.config import Account, AclConfig, AclConfigError, Perm, load
from broker_sim.acl.guard import MAX_CLOCK_SKEW_S, Demand, Guard, claimed_access_key

__all__ = ["Account", "AclConfig", "AclConfigError", "Demand", "Guard", "MAX_CLOCK_SKEW_S", "Perm",
           "claimed_access_key", "load"]
