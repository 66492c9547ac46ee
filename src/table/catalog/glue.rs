//! AWS Glue as the catalog: Iceberg tables as Athena, Trino, Spark and
//! pyiceberg read them (`table_type = ICEBERG`, `metadata_location`,
//! `previous_metadata_location`), one Glue database per namespace. Glue's
//! JSON API over HTTPS, signed with SigV4 by object_store's signer, with
//! credentials from object_store's AWS chain (environment, web identity,
//! ECS, instance metadata) and the region and endpoint of the AWS
//! environment (`AWS_REGION`, `AWS_ENDPOINT_URL_GLUE` or
//! `AWS_ENDPOINT_URL`).
//!
//! A move is a compare-and-swap twice over: the table is read, its
//! `metadata_location` compared, and `UpdateTable` sent with the
//! `VersionId` read, which Glue refuses when another writer updated the
//! table in between. Parameters and the storage descriptor another tool
//! set are kept.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use object_store::aws::{AmazonS3Builder, AwsAuthorizer, AwsCredential};
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::{ClientOptions, CredentialProvider};
use serde_json::{json, Value};

use super::CatalogName;
use crate::error::{Error, Result};

type Credentials = Arc<dyn CredentialProvider<Credential = AwsCredential>>;

pub(super) struct Glue {
    client: HttpClient,
    credentials: Credentials,
    region: String,
    endpoint: String,
}

/// A refusal of Glue's: its exception's name and message.
struct Refused {
    kind: String,
    message: String,
}

impl Refused {
    fn is(&self, kind: &str) -> bool {
        self.kind.ends_with(kind)
    }

    /// The error of Glue refusing `op` on `what`.
    fn error(self, op: &str, what: &dyn std::fmt::Display) -> Error {
        Error::Catalog(format!(
            "Glue {op} {what} refused: {}: {}",
            self.kind, self.message
        ))
    }
}

const PAGE: u64 = 100;

impl Glue {
    pub(super) fn open() -> Result<Glue> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let region = env("AWS_REGION")
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .ok_or_else(|| {
                Error::Catalog(
                    "catalog.type = \"glue\" needs the AWS region: set AWS_REGION".into(),
                )
            })?;
        let endpoint = env("AWS_ENDPOINT_URL_GLUE")
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .unwrap_or_else(|| format!("https://glue.{region}.amazonaws.com"));
        let endpoint = endpoint.trim_end_matches('/').to_string();
        // The S3 builder only lends its credential chain: the bucket is
        // never asked for.
        let credentials = AmazonS3Builder::from_env()
            .with_bucket_name("sluice-glue-credentials")
            .with_region(&region)
            .build()
            .map_err(|e| Error::Catalog(format!("Glue credentials: {e}")))?
            .credentials()
            .clone();
        let options = ClientOptions::new().with_allow_http(endpoint.starts_with("http://"));
        let client = ReqwestConnector::default()
            .connect(&options)
            .map_err(|e| Error::Catalog(format!("Glue's HTTP client: {e}")))?;
        Ok(Glue {
            client,
            credentials,
            region,
            endpoint,
        })
    }

    /// Glue operation `op` with `body`: its answer, or its refusal.
    async fn call(&self, op: &str, body: Value) -> Result<std::result::Result<Value, Refused>> {
        let fail = |what: String| Error::Catalog(format!("Glue {op} at {}: {what}", self.endpoint));
        let credential = self
            .credentials
            .get_credential()
            .await
            .map_err(|e| fail(format!("no AWS credentials: {e}")))?;
        let bytes = serde_json::to_vec(&body).map_err(|e| fail(e.to_string()))?;
        let mut request = http::Request::builder()
            .method("POST")
            .uri(format!("{}/", self.endpoint))
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amz-target", format!("AWSGlue.{op}"))
            .body(HttpRequestBody::from(bytes))
            .map_err(|e| fail(e.to_string()))?;
        AwsAuthorizer::new(&credential, "glue", &self.region)
            .try_authorize(&mut request, None)
            .map_err(|e| fail(e.to_string()))?;
        let response = self
            .client
            .execute(request)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = response.status();
        let text = response
            .into_body()
            .bytes()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let answer: Value = if text.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(&text).map_err(|e| {
                fail(format!(
                    "HTTP {status}, not JSON ({e}): {}",
                    String::from_utf8_lossy(&text[..text.len().min(200)])
                ))
            })?
        };
        if status.is_success() {
            return Ok(Ok(answer));
        }
        let kind = answer["__type"].as_str().unwrap_or("").to_string();
        let message = answer["message"]
            .as_str()
            .or(answer["Message"].as_str())
            .unwrap_or("")
            .to_string();
        if status.is_server_error() || kind.is_empty() {
            return Err(fail(format!("HTTP {status} {kind}: {message}")));
        }
        Ok(Err(Refused { kind, message }))
    }

    /// The table `name`, if Glue has it.
    async fn table(&self, name: &CatalogName) -> Result<Option<Value>> {
        let body = json!({"DatabaseName": name.namespace, "Name": name.table});
        match self.call("GetTable", body).await? {
            Ok(answer) => Ok(Some(answer["Table"].clone())),
            Err(r) if r.is("EntityNotFoundException") => Ok(None),
            Err(r) => Err(r.error("GetTable", name)),
        }
    }

    pub(super) async fn get(&self, name: &CatalogName) -> Result<Option<String>> {
        Ok(self.table(name).await?.and_then(|t| location_of(&t)))
    }

    /// The Iceberg tables of the Glue databases `namespaces` (the lake's:
    /// other databases of the account are never read), `in_flight`
    /// databases at a time. A database that does not exist holds none.
    pub(super) async fn list(
        &self,
        namespaces: &BTreeSet<String>,
        in_flight: usize,
    ) -> Result<HashMap<CatalogName, String>> {
        let listed: Vec<Result<Vec<(CatalogName, String)>>> = futures::stream::iter(namespaces)
            .map(|database| self.tables_of(database))
            .buffer_unordered(in_flight.max(1))
            .collect()
            .await;
        let mut held = HashMap::new();
        for tables in listed {
            held.extend(tables?);
        }
        Ok(held)
    }

    /// Every Iceberg table of one Glue database and where it points.
    async fn tables_of(&self, database: &str) -> Result<Vec<(CatalogName, String)>> {
        let mut tables = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut body = json!({"DatabaseName": database, "MaxResults": PAGE});
            if let Some(t) = &token {
                body["NextToken"] = json!(t);
            }
            let answer = match self.call("GetTables", body).await? {
                Ok(answer) => answer,
                Err(r) if r.is("EntityNotFoundException") => return Ok(tables),
                Err(r) => return Err(r.error("GetTables", &database)),
            };
            for t in answer["TableList"].as_array().into_iter().flatten() {
                if let (Some(table), Some(location)) = (t["Name"].as_str(), location_of(t)) {
                    let name = CatalogName {
                        namespace: database.to_string(),
                        table: table.to_string(),
                    };
                    tables.push((name, location));
                }
            }
            token = answer["NextToken"].as_str().map(String::from);
            if token.is_none() {
                return Ok(tables);
            }
        }
    }

    pub(super) async fn register(&self, name: &CatalogName, location: &str) -> Result<bool> {
        let database = json!({"DatabaseInput": {
            "Name": name.namespace,
            "Description": "Tables of a sluice lake",
        }});
        match self.call("CreateDatabase", database).await? {
            Ok(_) => {}
            Err(r) if r.is("AlreadyExistsException") => {}
            Err(r) => return Err(r.error("CreateDatabase", &name.namespace)),
        }
        let input = json!({
            "Name": name.table,
            "TableType": "EXTERNAL_TABLE",
            "Parameters": {
                "table_type": "ICEBERG",
                "metadata_location": location,
                "EXTERNAL": "TRUE",
            },
            "StorageDescriptor": {"Location": table_location(location)},
        });
        let body = json!({"DatabaseName": name.namespace, "TableInput": input});
        match self.call("CreateTable", body).await? {
            Ok(_) => Ok(true),
            Err(r) if r.is("AlreadyExistsException") => Ok(false),
            Err(r) => Err(r.error("CreateTable", name)),
        }
    }

    pub(super) async fn swap(&self, name: &CatalogName, from: &str, to: &str) -> Result<bool> {
        let Some(table) = self.table(name).await? else {
            return Ok(false);
        };
        if location_of(&table).as_deref() != Some(from) {
            return Ok(false);
        }
        let mut parameters = table["Parameters"].clone();
        if !parameters.is_object() {
            parameters = json!({});
        }
        parameters["metadata_location"] = json!(to);
        parameters["previous_metadata_location"] = json!(from);
        parameters["table_type"] = json!("ICEBERG");
        let mut storage = table["StorageDescriptor"].clone();
        if !storage.is_object() {
            storage = json!({});
        }
        storage["Location"] = json!(table_location(to));
        let mut input = json!({
            "Name": name.table,
            "TableType": table["TableType"].as_str().unwrap_or("EXTERNAL_TABLE"),
            "Parameters": parameters,
            "StorageDescriptor": storage,
        });
        for keep in ["Description", "Owner", "Retention", "PartitionKeys"] {
            if !table[keep].is_null() {
                input[keep] = table[keep].clone();
            }
        }
        let mut body = json!({"DatabaseName": name.namespace, "TableInput": input});
        if let Some(version) = table["VersionId"].as_str() {
            body["VersionId"] = json!(version);
        }
        match self.call("UpdateTable", body).await? {
            Ok(_) => Ok(true),
            Err(r) if r.is("ConcurrentModificationException") => Ok(false),
            Err(r) => Err(r.error("UpdateTable", name)),
        }
    }

    pub(super) async fn delete(&self, name: &CatalogName, location: &str) -> Result<bool> {
        let Some(table) = self.table(name).await? else {
            return Ok(false);
        };
        if location_of(&table).as_deref() != Some(location) {
            return Ok(false);
        }
        let body = json!({"DatabaseName": name.namespace, "Name": name.table});
        match self.call("DeleteTable", body).await? {
            Ok(_) => Ok(true),
            Err(r) if r.is("EntityNotFoundException") => Ok(false),
            Err(r) => Err(r.error("DeleteTable", name)),
        }
    }
}

/// The Iceberg metadata location of a Glue table (none for a table that is
/// not Iceberg).
fn location_of(table: &Value) -> Option<String> {
    let p = &table["Parameters"];
    let iceberg = p["table_type"]
        .as_str()
        .is_some_and(|t| t.eq_ignore_ascii_case("ICEBERG"));
    iceberg
        .then(|| p["metadata_location"].as_str().map(String::from))
        .flatten()
}

/// The table folder of a metadata location `<folder>/metadata/v<N>.metadata.json`.
fn table_location(metadata: &str) -> &str {
    metadata
        .rsplit_once("/metadata/")
        .map_or(metadata, |(folder, _)| folder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glue_table_is_iceberg_by_its_parameters_and_lives_in_its_folder() {
        let t = json!({"Parameters": {"table_type": "iceberg", "metadata_location": "s3://b/p/shop/t/metadata/v3.metadata.json"}});
        assert_eq!(
            location_of(&t).as_deref(),
            Some("s3://b/p/shop/t/metadata/v3.metadata.json")
        );
        assert_eq!(
            location_of(&json!({"Parameters": {"table_type": "DELTA", "metadata_location": "x"}})),
            None
        );
        assert_eq!(location_of(&json!({"Name": "t"})), None);
        assert_eq!(
            table_location("s3://b/p/_current/shop/t/metadata/v3.metadata.json"),
            "s3://b/p/_current/shop/t"
        );
    }
}
