package argocd

import (
	"fmt"
	"os"
	"testing"

	"github.com/toolgate/toolgate/internal/testenv"
)

// env is a control plane with toolgate's CRDs and admission policies, shared by the
// tests that send what an Argo CD action or sync would send.
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	env, err = testenv.Start(testenv.WithAdmissionPolicies())
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	return m.Run()
}
