package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The service account files of a pod.
const (
	saDir       = "/var/run/secrets/kubernetes.io/serviceaccount"
	pollEvery   = 5 * time.Millisecond
	pollTimeout = time.Second
)

// poll runs in a pod: it asks for http://SVC:PORT/bench-poll until the
// answer is the local process's. It finds the Service's ClusterIP in the
// API (polling until the Service exists) rather than in DNS, so that the
// cluster DNS's negative cache of a name asked for before it existed (5 s
// here, 30 s in a default CoreDNS) is not counted: plug cannot change it.
// It prints "polling" once it polls, and "reached UNIXNANO" when done.
func poll(args []string) error {
	fs := flag.NewFlagSet("poll", flag.ExitOnError)
	ns := fs.String("ns", "", "the Service's namespace")
	svc := fs.String("svc", "", "the Service's name")
	port := fs.Int("port", 80, "the Service's port")
	want := fs.String("want", localAnswer, "the answer that ends the poll")
	limit := fs.Duration("timeout", 60*time.Second, "give up after this long")
	fs.Parse(args)
	if *ns == "" || *svc == "" {
		return errors.New("give -ns and -svc")
	}
	api, err := inClusterAPI()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(*limit)
	fmt.Println("polling")
	var ip string
	for ip == "" {
		if time.Now().After(deadline) {
			return fmt.Errorf("service %s/%s did not appear within %v", *ns, *svc, *limit)
		}
		if ip, err = api.clusterIP(*ns, *svc); err != nil {
			return err
		}
		if ip == "" {
			time.Sleep(pollEvery)
		}
	}
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(*port)) + pollPath
	client := &http.Client{Timeout: pollTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	var last string
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			last = strings.TrimSpace(string(body))
			if last == *want {
				fmt.Println("reached", time.Now().UnixNano())
				return nil
			}
		} else {
			last = err.Error()
		}
		time.Sleep(pollEvery)
	}
	return fmt.Errorf("%s did not answer %q within %v; last: %s", url, *want, *limit, last)
}

// kubeAPI reads Services with the pod's service account.
type kubeAPI struct {
	base   string
	token  string
	client *http.Client
}

func inClusterAPI() (*kubeAPI, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" {
		return nil, errors.New("not in a pod: KUBERNETES_SERVICE_HOST is unset")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("no certificate in " + saDir + "/ca.crt")
	}
	return &kubeAPI{
		base:   "https://" + net.JoinHostPort(host, port),
		token:  strings.TrimSpace(string(token)),
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	}, nil
}

// clusterIP returns the Service's ClusterIP, or "" while it does not exist.
func (k *kubeAPI) clusterIP(ns, name string) (string, error) {
	req, err := http.NewRequest("GET", k.base+"/api/v1/namespaces/"+ns+"/services/"+name, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	resp, err := k.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return "", nil
	case http.StatusOK:
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("reading service %s/%s: %s: %s", ns, name, resp.Status, body)
	}
	var svc struct {
		Spec struct {
			ClusterIP string `json:"clusterIP"`
		} `json:"spec"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&svc); err != nil {
		return "", err
	}
	return svc.Spec.ClusterIP, nil
}
