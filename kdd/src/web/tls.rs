//! TLS for kd web (a non-loopback listener must have it): the King's own
//! certificate and key (`tls_cert`, `tls_key`, PEM), or a self-signed one
//! kd makes with rcgen once and keeps beside its registry (`web/cert.pem`,
//! `web/key.pem`: a 0700 directory, 0600 files, never through a symlink),
//! whose SHA-256 fingerprint `kd web` prints so that the King can check
//! what the browser shows. rustls with the ring provider, as the rest of
//! kdd.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What a TLS listener serves with.
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// SHA-256 of the leaf certificate, hex pairs joined by `:`.
    pub fingerprint: String,
    pub self_signed: bool,
}

/// A PEM file, read without following a symlink, at most 1 MiB.
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    Read::by_ref(&mut file)
        .take(1 << 20)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(bytes)
}

/// The King's certificate chain and key.
pub fn load(cert: &Path, key: &Path) -> Result<Tls, String> {
    build(&read_pem(cert)?, &read_pem(key)?, false)
        .map_err(|e| format!("{} and {}: {e}", cert.display(), key.display()))
}

/// kd's own self-signed certificate in `dir`, made for `names` the first
/// time and reused after — until it is asked for a name it was not made
/// for (`names` beside it lists them): then a new one is made for them
/// all, with a new fingerprint.
pub fn self_signed(dir: &Path, names: Vec<String>) -> Result<Tls, String> {
    let (cert_path, key_path, names_path) = (dir.join("cert.pem"), dir.join("key.pem"), dir.join("names"));
    let made_for: Vec<String> =
        std::fs::read_to_string(&names_path).map(|s| s.lines().map(str::to_string).collect()).unwrap_or_default();
    let covered = names.iter().all(|n| made_for.contains(n));
    if cert_path.exists() && key_path.exists() && covered {
        return build(&read_pem(&cert_path)?, &read_pem(&key_path)?, true)
            .map_err(|e| format!("kd's certificate in {}: {e} (remove it for a new one)", dir.display()));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let mut all = made_for;
    for n in names {
        if !all.contains(&n) {
            all.push(n);
        }
    }
    let made =
        rcgen::generate_simple_self_signed(all.clone()).map_err(|e| format!("cannot make a certificate: {e}"))?;
    let (cert, key) = (made.cert.pem(), made.signing_key.serialize_pem());
    let listed = all.join("\n") + "\n";
    for (path, text) in [(&key_path, &key), (&cert_path, &cert), (&names_path, &listed)] {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        f.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    build(cert.as_bytes(), key.as_bytes(), true)
}

fn build(cert: &[u8], key: &[u8], self_signed: bool) -> Result<Tls, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not a PEM certificate chain: {e}"))?;
    let Some(leaf) = chain.first() else { return Err("no certificate in the PEM".into()) };
    let fingerprint = fingerprint(leaf.as_ref());
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("not a PEM private key: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key do not make a TLS configuration: {e}"))?;
    Ok(Tls { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), fingerprint, self_signed })
}

/// SHA-256 of a DER certificate as browsers show it: hex pairs joined by `:`.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    digest.as_ref().iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn kds_certificate_is_made_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let web = dir.path().join("web");
        let first = self_signed(&web, vec!["localhost".into()]).unwrap();
        assert!(first.self_signed);
        assert_eq!(first.fingerprint.len(), 32 * 3 - 1);
        for (p, mode) in [(web.clone(), 0o700), (web.join("key.pem"), 0o600), (web.join("cert.pem"), 0o600)] {
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, mode, "{}", p.display());
        }
        let again = self_signed(&web, vec!["localhost".into()]).unwrap();
        assert_eq!(again.fingerprint, first.fingerprint, "reused");
        let loaded = load(&web.join("cert.pem"), &web.join("key.pem")).unwrap();
        assert_eq!(loaded.fingerprint, first.fingerprint);
        assert!(!loaded.self_signed);
        // A name it was not made for: a new one, for every name.
        let more = self_signed(&web, vec!["kd.example.lan".into(), "10.0.0.7".into()]).unwrap();
        assert_ne!(more.fingerprint, first.fingerprint);
        assert_eq!(std::fs::read_to_string(web.join("names")).unwrap(), "localhost\nkd.example.lan\n10.0.0.7\n");
        assert_eq!(std::fs::metadata(web.join("names")).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(self_signed(&web, vec!["10.0.0.7".into()]).unwrap().fingerprint, more.fingerprint);
    }

    #[test]
    fn a_bad_pem_or_a_symlink_is_refused_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "hello").unwrap();
        let e = load(&junk, &junk).err().unwrap();
        assert!(e.contains("no certificate") && e.contains("junk.pem"), "{e}");
        let link = dir.path().join("link.pem");
        std::os::unix::fs::symlink(&junk, &link).unwrap();
        let e = load(&link, &junk).err().unwrap();
        assert!(e.contains("cannot read") && e.contains("link.pem"), "{e}");
    }
}
