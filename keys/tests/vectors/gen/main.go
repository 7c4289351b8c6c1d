// Command gen writes kseal's own wire-format interop vectors (go-stdlib.json), with Go's
// standard library only: crypto/rsa (OAEP, SHA-256, the scope label) wrapping a fresh 32-byte
// AES-256-GCM key (12 zero bytes of nonce, no AAD), framed as Bitnami Sealed Secrets frames a
// value: a big-endian uint16 length of the RSA block, the RSA block, then the GCM ciphertext
// and tag. The key is made as Bitnami's controller makes one (RSA-4096, a self-signed
// certificate, CN=sealed-secret, 10 years). Go is an independent implementation of every
// primitive kseal uses (AWS-LC, RustCrypto), so the vectors pin the format, not one library.
//
//	go run ./keys/tests/vectors/gen > keys/tests/vectors/go-stdlib.json
//
// The key is test-only and published on purpose; never use it for anything real.
package main

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand"
	"os"
	"runtime"
	"time"
)

type key struct {
	Bits                 int    `json:"bits"`
	PublicExponent       int    `json:"public_exponent"`
	PrivateKeyPKCS1PEM   string `json:"private_key_pkcs1_pem"`
	PrivateKeyPKCS8PEM   string `json:"private_key_pkcs8_pem"`
	PublicKeySPKIPEM     string `json:"public_key_spki_pem"`
	CertificatePEM       string `json:"certificate_pem"`
	SSHFingerprintSHA256 string `json:"ssh_fingerprint_sha256"`
	ModulusSHA256Hex     string `json:"modulus_sha256_hex"`
}

type vector struct {
	ID                 string  `json:"id"`
	Scope              string  `json:"scope"`
	Namespace          string  `json:"namespace"`
	Name               string  `json:"name"`
	Label              string  `json:"label"`
	LabelB64           string  `json:"label_b64"`
	Expect             string  `json:"expect"`
	Note               string  `json:"note,omitempty"`
	PlaintextLen       *int    `json:"plaintext_len,omitempty"`
	PlaintextSHA256Hex *string `json:"plaintext_sha256_hex,omitempty"`
	PlaintextB64       *string `json:"plaintext_b64,omitempty"`
	SealedB64          string  `json:"sealed_b64"`
}

type file struct {
	Format     string   `json:"format"`
	Set        string   `json:"set"`
	Generator  string   `json:"generator"`
	Created    string   `json:"created"`
	WireFormat string   `json:"wire_format"`
	Key        key      `json:"key"`
	Vectors    []vector `json:"vectors"`
}

const namespace, name = "kseal-vectors", "app-credentials"

func label(scope, ns, n string) string {
	switch scope {
	case "strict":
		return ns + "/" + n
	case "namespace-wide":
		return ns
	default:
		return ""
	}
}

func seal(pub *rsa.PublicKey, lbl string, plaintext []byte) []byte {
	sessionKey := make([]byte, 32)
	must(readFull(sessionKey))
	rsaCT, err := rsa.EncryptOAEP(sha256.New(), rand.Reader, pub, sessionKey, []byte(lbl))
	must(err)
	block, err := aes.NewCipher(sessionKey)
	must(err)
	gcm, err := cipher.NewGCM(block)
	must(err)
	aesCT := gcm.Seal(nil, make([]byte, gcm.NonceSize()), plaintext, nil)
	out := make([]byte, 2, 2+len(rsaCT)+len(aesCT))
	binary.BigEndian.PutUint16(out, uint16(len(rsaCT)))
	return append(append(out, rsaCT...), aesCT...)
}

func readFull(b []byte) error { _, err := rand.Read(b); return err }

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// sshFingerprint is what `ssh-keygen -lf` prints for an RSA public key.
func sshFingerprint(pub *rsa.PublicKey) string {
	var wire bytes.Buffer
	putString := func(b []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		wire.Write(n[:])
		wire.Write(b)
	}
	mpint := func(x *big.Int) []byte {
		b := x.Bytes()
		if len(b) > 0 && b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	putString([]byte("ssh-rsa"))
	putString(mpint(big.NewInt(int64(pub.E))))
	putString(mpint(pub.N))
	sum := sha256.Sum256(wire.Bytes())
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func pemString(kind string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}))
}

func main() {
	priv, err := rsa.GenerateKey(rand.Reader, 4096)
	must(err)
	now := time.Now().UTC().Truncate(time.Second)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	must(err)
	template := x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sealed-secret"},
		Issuer:                pkix.Name{CommonName: "sealed-secret"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	certDER, err := x509.CreateCertificate(rand.Reader, &template, &template, &priv.PublicKey, priv)
	must(err)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(priv)
	must(err)
	spki, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	must(err)
	modulus := sha256.Sum256(priv.N.Bytes())

	binary256 := make([]byte, 256)
	for i := range binary256 {
		binary256[i] = byte(i)
	}
	random16k := make([]byte, 16*1024)
	mrand.New(mrand.NewSource(20261126)).Read(random16k)
	plaintexts := []struct {
		id    string
		value []byte
	}{
		{"empty", []byte{}},
		{"ascii", []byte("c0rrect-h0rse!")},
		{"binary256", binary256},
		{"random16k", random16k},
	}

	out := file{
		Format:    "kseal-interop-vectors/v1",
		Set:       "go-stdlib",
		Generator: runtime.Version() + " crypto/rsa EncryptOAEP(SHA-256) + crypto/cipher AES-256-GCM (keys/tests/vectors/gen/main.go)",
		Created:   now.Format(time.RFC3339),
		WireFormat: "uint16be(len(rsa_ct)) || RSA-OAEP-SHA256(label=scope label, 32-byte AES key) || " +
			"AES-256-GCM(nonce=12 zero bytes, no AAD) ciphertext||tag",
		Key: key{
			Bits:                 priv.N.BitLen(),
			PublicExponent:       priv.E,
			PrivateKeyPKCS1PEM:   pemString("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(priv)),
			PrivateKeyPKCS8PEM:   pemString("PRIVATE KEY", pkcs8),
			PublicKeySPKIPEM:     pemString("PUBLIC KEY", spki),
			CertificatePEM:       pemString("CERTIFICATE", certDER),
			SSHFingerprintSHA256: sshFingerprint(&priv.PublicKey),
			ModulusSHA256Hex:     hex.EncodeToString(modulus[:]),
		},
	}
	var strictASCII []byte
	for _, scope := range []string{"strict", "namespace-wide", "cluster-wide"} {
		lbl := label(scope, namespace, name)
		for _, p := range plaintexts {
			sealed := seal(&priv.PublicKey, lbl, p.value)
			if scope == "strict" && p.id == "ascii" {
				strictASCII = sealed
			}
			n := len(p.value)
			sum := sha256.Sum256(p.value)
			sumHex := hex.EncodeToString(sum[:])
			b64 := base64.StdEncoding.EncodeToString(p.value)
			out.Vectors = append(out.Vectors, vector{
				ID: scope + "/" + p.id, Scope: scope, Namespace: namespace, Name: name,
				Label: lbl, LabelB64: base64.StdEncoding.EncodeToString([]byte(lbl)),
				Expect: "ok", PlaintextLen: &n, PlaintextSHA256Hex: &sumHex, PlaintextB64: &b64,
				SealedB64: base64.StdEncoding.EncodeToString(sealed),
			})
		}
	}
	negative := func(id, scope, n, note string, sealed []byte) {
		lbl := label(scope, namespace, n)
		out.Vectors = append(out.Vectors, vector{
			ID: "negative/" + id, Scope: scope, Namespace: namespace, Name: n,
			Label: lbl, LabelB64: base64.StdEncoding.EncodeToString([]byte(lbl)),
			Expect: "error", Note: note, SealedB64: base64.StdEncoding.EncodeToString(sealed),
		})
	}
	flip := func(at int) []byte {
		b := append([]byte(nil), strictASCII...)
		if at < 0 {
			at += len(b)
		}
		b[at] ^= 0x01
		return b
	}
	rsaLen := int(binary.BigEndian.Uint16(strictASCII))
	negative("strict-wrong-name", "strict", "other-app", "strict/ascii opened as another Secret name", strictASCII)
	negative("strict-as-namespace-wide", "namespace-wide", name, "strict/ascii opened with the namespace-wide label", strictASCII)
	negative("strict-as-cluster-wide", "cluster-wide", name, "strict/ascii opened with the empty (cluster-wide) label", strictASCII)
	negative("gcm-tag-flipped", "strict", name, "strict/ascii with a bit of the GCM tag (last byte) flipped", flip(-1))
	negative("gcm-body-flipped", "strict", name, "strict/ascii with a bit of the AES ciphertext flipped", flip(2+rsaLen))
	negative("rsa-ct-flipped", "strict", name, "strict/ascii with a bit in the middle of the RSA block flipped", flip(2+rsaLen/2))
	negative("truncated-1-byte", "strict", name, "one byte: shorter than the length prefix", strictASCII[:1])
	negative("length-prefix-too-big", "strict", name, "the prefix says more RSA bytes than follow", strictASCII[:2+rsaLen-1])
	negative("no-aes-part", "strict", name, "the RSA block alone, without the GCM part", strictASCII[:2+rsaLen])

	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	must(enc.Encode(out))
}
