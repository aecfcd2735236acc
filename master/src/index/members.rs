//! The master group's membership, as the replicated index holds it: one `Membership` record
//! (`symcluster.cluster.v1`, prost) in the `membership` table — each member's id, address,
//! whether it is a learner and whether the leader saw it take part, and raft-rs's `ConfState`
//! as bytes (the index does not read them).
//!
//! It changes only by applying committed log entries (a membership change, `MembersSeen`), in
//! the same write transaction as the applied index, so a restart, a snapshot and a backup carry
//! the membership of the entry they reflect. A new group writes its first membership from
//! `--peers` ([`Index::seed_membership`]); a master joining a group (`--join`) has none until
//! the leader's snapshot brings it.
//!
//! The same table holds, under `restored_from`, the backup a master's index was seeded from
//! (`--restore`, [`Index::restore_backup_from`]): this master's own, not replicated (no log
//! entry writes it, snapshots do not carry it, [`super::digest`] leaves the table out).

use prost::Message;
use redb::{ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

use super::{Index, IndexError, db};

/// `"membership"` → the encoded `Membership`; `"restored_from"` → the encoded
/// `symcluster.v1.RestoredFrom`.
pub(crate) const MEMBERSHIP: TableDefinition<&str, &[u8]> = TableDefinition::new("membership");
const KEY: &str = "membership";
const RESTORED_FROM: &str = "restored_from";

/// Reads the membership from `table`; `None` when none was written.
pub(crate) fn read(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<pb::Membership>, IndexError> {
    let Some(bytes) = table.get(KEY).map_err(db)? else {
        return Ok(None);
    };
    pb::Membership::decode(bytes.value())
        .map(Some)
        .map_err(|source| IndexError::Decode {
            what: "membership".into(),
            source,
        })
}

/// Writes `membership` into `table`.
pub(crate) fn write(
    table: &mut Table<'_, &'static str, &'static [u8]>,
    membership: &pb::Membership,
) -> Result<(), IndexError> {
    table
        .insert(KEY, membership.encode_to_vec().as_slice())
        .map_err(db)?;
    Ok(())
}

/// Marks `ids` as seen in `membership`; whether anything changed.
pub(crate) fn mark_seen(membership: &mut pb::Membership, ids: &[u64]) -> bool {
    let mut changed = false;
    for member in &mut membership.members {
        if !member.seen && ids.contains(&member.id) {
            member.seen = true;
            changed = true;
        }
    }
    changed
}

impl Index {
    /// The group's membership as of the applied index; `None` before a group's first one was
    /// written (a master joining a group, or an index from before membership changes).
    pub fn membership(&self) -> Result<Option<pb::Membership>, IndexError> {
        let read_txn = self.db.begin_read().map_err(db)?;
        match read_txn.open_table(MEMBERSHIP) {
            Ok(table) => read(&table),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(db(e)),
        }
    }

    /// The backup this master's index was seeded from (`--restore`); `None` when it was not.
    pub fn restored_from(&self) -> Result<Option<v1::RestoredFrom>, IndexError> {
        let read_txn = self.db.begin_read().map_err(db)?;
        let table = match read_txn.open_table(MEMBERSHIP) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(db(e)),
        };
        let Some(bytes) = table.get(RESTORED_FROM).map_err(db)? else {
            return Ok(None);
        };
        v1::RestoredFrom::decode(bytes.value())
            .map(Some)
            .map_err(|source| IndexError::Decode {
                what: "restored_from".into(),
                source,
            })
    }

    /// Writes `membership` durably when the index holds none yet (a new group, from
    /// `--peers`; an index from before membership changes); whether it was written.
    pub fn seed_membership(&self, membership: &pb::Membership) -> Result<bool, IndexError> {
        let txn = self.db.begin_write().map_err(db)?;
        let written = {
            let mut table = txn.open_table(MEMBERSHIP).map_err(db)?;
            if read(&table)?.is_some() {
                false
            } else {
                write(&mut table, membership)?;
                true
            }
        };
        txn.commit().map_err(db)?;
        Ok(written)
    }
}

/// Deletes the membership in `txn` and records that the index is seeded from the backup
/// `restored_from` describes (a new group's membership is its own, from `--peers`).
pub(crate) fn clear_for_backup(
    txn: &WriteTransaction,
    restored_from: &v1::RestoredFrom,
) -> Result<(), IndexError> {
    txn.delete_table(MEMBERSHIP).map_err(db)?;
    let mut table = txn.open_table(MEMBERSHIP).map_err(db)?;
    table
        .insert(RESTORED_FROM, restored_from.encode_to_vec().as_slice())
        .map_err(db)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> (tempfile::TempDir, Index) {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_file(&dir.path().join("m.redb")).unwrap();
        (dir, index)
    }

    fn member(id: u64) -> pb::MemberRecord {
        pb::MemberRecord {
            id,
            address: format!("http://127.0.0.1:{}", 7000 + id),
            learner: false,
            seen: false,
        }
    }

    #[test]
    fn a_seeded_membership_is_kept_and_not_replaced_by_a_second_seed() {
        let (_dir, index) = index();
        assert_eq!(index.membership().unwrap(), None);
        let first = pb::Membership {
            members: vec![member(1), member(2)],
            conf_state: vec![1, 2, 3],
        };
        assert!(index.seed_membership(&first).unwrap());
        let second = pb::Membership {
            members: vec![member(9)],
            conf_state: Vec::new(),
        };
        assert!(!index.seed_membership(&second).unwrap());
        assert_eq!(index.membership().unwrap(), Some(first));
    }

    #[test]
    fn only_members_of_the_group_are_marked_seen() {
        let mut membership = pb::Membership {
            members: vec![member(1), member(2)],
            conf_state: Vec::new(),
        };
        assert!(mark_seen(&mut membership, &[2, 5]));
        assert!(!mark_seen(&mut membership, &[2]));
        let seen: Vec<(u64, bool)> = membership.members.iter().map(|m| (m.id, m.seen)).collect();
        assert_eq!(seen, vec![(1, false), (2, true)]);
    }
}
