//! The retention floor (`_sluice/manifest_floor.json`): every manifest
//! below the seq it names is deleted, so readers of old manifests start
//! there. `crate::commit::retention` moves it.

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Every manifest below the seq this names is deleted, or being deleted.
pub const FLOOR_PATH: &str = "_sluice/manifest_floor.json";

#[derive(Debug, Serialize, Deserialize)]
pub struct Floor {
    pub seq: u64,
    /// Set while a round deletes the manifests from here to `seq`: a round
    /// that a crash ended is taken up from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_from: Option<u64>,
}

/// The floor as the lake holds it (none: nothing deleted).
pub async fn read_floor(store: &dyn ObjectStore) -> Result<Floor> {
    let empty = Floor {
        seq: 0,
        pending_from: None,
    };
    let bytes = match store.get(&Path::from(FLOOR_PATH)).await {
        Ok(found) => found.bytes().await?,
        Err(object_store::Error::NotFound { .. }) => return Ok(empty),
        Err(e) => return Err(e.into()),
    };
    Ok(serde_json::from_slice::<Floor>(&bytes).unwrap_or(empty))
}

/// The seq below which every manifest is deleted (0: none is).
pub async fn floor_seq(store: &dyn ObjectStore) -> Result<u64> {
    Ok(read_floor(store).await?.seq)
}
