package run

import (
	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/config"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
)

// ReadConfig returns the controllers' settings `run --config file` runs
// with when no flag is given (the defaults for file ""), for commands that
// judge the cluster by them (explain). Errors name file:line.
func ReadConfig(file string) (controllers.Config, error) {
	o := newOptions()
	if file == "" {
		return o.config, nil
	}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	for _, s := range sections(o) {
		s.Register(fs)
	}
	if err := config.Apply(file, fs, defaultSections); err != nil {
		return controllers.Config{}, err
	}
	return o.config, nil
}
