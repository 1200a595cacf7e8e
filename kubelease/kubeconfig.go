package kubelease

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the part of a kubeconfig file the client reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			// Exec and AuthProvider are read only to be refused.
			Exec                  map[string]any `json:"exec"`
			AuthProvider          map[string]any `json:"auth-provider"`
			Token                 string         `json:"token"`
			TokenFile             string         `json:"tokenFile"`
			ClientCertificate     string         `json:"client-certificate"`
			ClientCertificateData string         `json:"client-certificate-data"`
			ClientKey             string         `json:"client-key"`
			ClientKeyData         string         `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster   string `json:"cluster"`
			User      string `json:"user"`
			Namespace string `json:"namespace"`
		} `json:"context"`
	} `json:"contexts"`
}

// LoadKubeconfig returns a client for the current context of the kubeconfig
// file at path: its cluster's server and CA, its user's token (token or
// tokenFile) or client certificate (client-certificate and client-key, or
// their -data forms), its namespace. Relative file names are read from the
// file's directory. Users authenticated by an exec plugin or an auth
// provider are not supported: give them a token or a certificate.
func LoadKubeconfig(path string) (*Client, error) {
	cfg, err := ReadKubeconfig(path)
	if err != nil {
		return nil, err
	}
	return NewClient(cfg)
}

// ReadKubeconfig reads the current context of the kubeconfig file at path
// into a ClientConfig (see LoadKubeconfig).
func ReadKubeconfig(path string) (ClientConfig, error) {
	var cfg ClientConfig
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("kubelease: reading the kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		return cfg, fmt.Errorf("kubelease: kubeconfig %s: %w", path, err)
	}
	if kc.CurrentContext == "" {
		return cfg, fmt.Errorf("kubelease: kubeconfig %s names no current-context", path)
	}
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	b64 := func(what, s string) ([]byte, error) {
		if s == "" {
			return nil, nil
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("kubelease: kubeconfig %s: %s is not base64", path, what)
		}
		return b, nil
	}
	found := false
	var clusterName, userName string
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			found = true
			clusterName, userName, cfg.Namespace = c.Context.Cluster, c.Context.User, c.Context.Namespace
		}
	}
	if !found {
		return cfg, fmt.Errorf("kubelease: kubeconfig %s: no context %q", path, kc.CurrentContext)
	}
	found = false
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		found = true
		cfg.Server, cfg.CAFile, cfg.InsecureSkipVerify = c.Cluster.Server, rel(c.Cluster.CertificateAuthority), c.Cluster.InsecureSkipTLSVerify
		if cfg.CAData, err = b64("certificate-authority-data", c.Cluster.CertificateAuthorityData); err != nil {
			return cfg, err
		}
	}
	if !found {
		return cfg, fmt.Errorf("kubelease: kubeconfig %s: context %q names cluster %q, which it does not hold", path, kc.CurrentContext, clusterName)
	}
	found = false
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		found = true
		if u.User.Exec != nil || u.User.AuthProvider != nil {
			return cfg, fmt.Errorf("kubelease: kubeconfig %s: user %q authenticates with an exec plugin or auth provider, which this client does not run: give it a token or a client certificate", path, userName)
		}
		cfg.Token, cfg.TokenFile = u.User.Token, rel(u.User.TokenFile)
		cfg.CertFile, cfg.KeyFile = rel(u.User.ClientCertificate), rel(u.User.ClientKey)
		if cfg.CertData, err = b64("client-certificate-data", u.User.ClientCertificateData); err != nil {
			return cfg, err
		}
		if cfg.KeyData, err = b64("client-key-data", u.User.ClientKeyData); err != nil {
			return cfg, err
		}
	}
	if !found && userName != "" {
		return cfg, fmt.Errorf("kubelease: kubeconfig %s: context %q names user %q, which it does not hold", path, kc.CurrentContext, userName)
	}
	return cfg, nil
}
