# bash completion for wsyncctl, wsync-top, wsyncd, wsync-demo, wsync-bench and
# wsync-relay.
# make install puts it in PREFIX/share/bash-completion/completions under each
# command's name; source it by hand elsewhere.

# The models of the broker named on the command line, read from its control
# segment (wsyncctl models asks the broker nothing).
_wsync_models()
{
	local i endpoint=()
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--name|--endpoint) endpoint=("${COMP_WORDS[i]}" "${COMP_WORDS[i+1]}") ;;
		esac
	done
	wsyncctl "${endpoint[@]}" models 2>/dev/null | awk 'NR > 1 { print $1 }'
}

# Instance names: the brokers with a state file in the run directory.
_wsync_instances()
{
	local run=${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/wsync}
	run=${run:-/tmp/wsync-$(id -u)}
	local f
	for f in "$run"/*.state; do
		[[ -e $f ]] && f=${f##*/} && printf '%s\n' "${f%.state}"
	done
}

_wsyncctl()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	local commands="status models sessions ping health metrics serve-metrics wait dump load verify rm"
	local common="--name --endpoint --json --timeout --help"
	local cmd="" i
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--name|--endpoint|--timeout) ((i++)) ;;
		-*) ;;
		*) cmd=${COMP_WORDS[i]}; break ;;
		esac
	done
	case $prev in
	--name) COMPREPLY=($(compgen -W "$(_wsync_instances)" -- "$cur")); return ;;
	--endpoint|-o|--output) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	--timeout|--after|--version|--step|--listen) return ;;
	--model) COMPREPLY=($(compgen -W "$(_wsync_models)" -- "$cur")); return ;;
	esac
	if [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W "$commands $common --version" -- "$cur"))
		return
	fi
	case $cmd in
	wait) COMPREPLY=($(compgen -W "$common --after $(_wsync_models)" -- "$cur")) ;;
	dump) COMPREPLY=($(compgen -W "$common -o --output --version $(_wsync_models)" -- "$cur")) ;;
	verify) COMPREPLY=($(compgen -W "$common --version $(_wsync_models)" -- "$cur")) ;;
	rm) COMPREPLY=($(compgen -W "$common $(_wsync_models)" -- "$cur")) ;;
	load)
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "$common --model --step --no-checksum" -- "$cur"))
		else
			COMPREPLY=($(compgen -f -X '!*.safetensors' -- "$cur") $(compgen -d -- "$cur"))
		fi ;;
	serve-metrics) COMPREPLY=($(compgen -W "$common --listen" -- "$cur")) ;;
	*) COMPREPLY=($(compgen -W "$common" -- "$cur")) ;;
	esac
}

_wsync_top()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	case $prev in
	--name) COMPREPLY=($(compgen -W "$(_wsync_instances)" -- "$cur")); return ;;
	--endpoint) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	-d|-n|--timeout) return ;;
	esac
	COMPREPLY=($(compgen -W "--name --endpoint -d -n -b --json --timeout --help --version" -- "$cur"))
}

_wsyncd()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	case $prev in
	--socket|--log-file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	--log-level) COMPREPLY=($(compgen -W "error warn info debug" -- "$cur")); return ;;
	--huge-pages) COMPREPLY=($(compgen -W "auto on off" -- "$cur")); return ;;
	--gpus) COMPREPLY=($(compgen -W "all none" -- "$cur")); return ;;
	--group) COMPREPLY=($(compgen -g -- "$cur")); return ;;
	--name|--shm-limit|--max-slots) return ;;
	esac
	COMPREPLY=($(compgen -W "--name --socket --shm-limit --max-slots --group --log-level
		--log-file --keep --no-keep --fresh --gpus --huge-pages --help --version" -- "$cur"))
}

_wsync_demo()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	case $prev in
	--wsyncd|--endpoint) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	--name) COMPREPLY=($(compgen -W "$(_wsync_instances)" -- "$cur")); return ;;
	--seconds|--collectors|--mib|--hz|--tensors|--id|--model|--timeout) return ;;
	esac
	case ${COMP_WORDS[1]} in
	trainer) COMPREPLY=($(compgen -W "--name --endpoint --model --mib --hz --tensors --timeout
		--help" -- "$cur")) ;;
	collector) COMPREPLY=($(compgen -W "--name --endpoint --model --id --timeout --help" -- "$cur")) ;;
	*) COMPREPLY=($(compgen -W "trainer collector --wsyncd --seconds --collectors --mib --hz
		--tensors --model --timeout --help --version" -- "$cur")) ;;
	esac
}

_wsync_bench()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	case $prev in
	--wsyncd|--json|--python|--peers-script) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	--only)
		# the scenarios wsync-bench --help lists (tools/bench/main.c), comma-separated
		local names
		names=$(wsync-bench --help 2>/dev/null | sed -n '/--only LIST/,/(default: all)/p' |
			sed -e 's/.*comma-separated://' -e 's/(default: all)//' -e 's/^ *--only.*//' | tr -d ',')
		names=${names:-publish acquire wake sustained peers shard checksum e2e scale gpu hostile python serving}
		local prefix=""
		[[ $cur == *,* ]] && prefix=${cur%,*},
		COMPREPLY=($(compgen -P "$prefix" -W "$names" -- "${cur##*,}"))
		return ;;
	--repeats) return ;;
	esac
	COMPREPLY=($(compgen -W "--wsyncd --quick --only --repeats --json --python --peers-script
		--help --version" -- "$cur"))
}

complete -F _wsyncctl wsyncctl
complete -F _wsync_top wsync-top
complete -F _wsyncd wsyncd
complete -F _wsync_demo wsync-demo
_wsync_relay()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	case $prev in
	--name) COMPREPLY=($(compgen -W "$(_wsync_instances)" -- "$cur")); return ;;
	--endpoint|--secret-file|--metrics|--log) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	--model) COMPREPLY=($(compgen -W "$(_wsync_models)" -- "$cur")); return ;;
	--backend) COMPREPLY=($(compgen -W "auto gloo nccl" -- "$cur")); return ;;
	--delta) COMPREPLY=($(compgen -W "auto on off" -- "$cur")); return ;;
	--iface) COMPREPLY=($(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")); return ;;
	--client-name|--master-addr|--master-port|--rank|--world-size|--bind|--device|--level|\
	--threads|--timeout|--heartbeat|--connect-timeout|--slots) return ;;
	esac
	COMPREPLY=($(compgen -W "--model --endpoint --name --client-name --master-addr
		--master-port --rank --world-size --bind --secret-file --insecure --backend --device
		--iface --delta --level --threads --metrics --timeout --heartbeat --connect-timeout
		--slots --log --quiet --staging --json --help --version" -- "$cur"))
}

complete -F _wsync_bench wsync-bench
complete -F _wsync_relay wsync-relay
