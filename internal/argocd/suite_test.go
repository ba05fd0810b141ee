package argocd

import (
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// env is a control plane with toolgate's CRDs and admission policies, shared by the
// tests that send what an Argo CD action or sync would send.
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &env, nil, testenv.WithAdmissionPolicies()))
}
